#!/usr/bin/env bash
# GPU validation of perfctl (issue 18): the gpu-marked tests, a compare of two refs
# where one makes a CuPy kernel slower (timed with CUDA events), and the built-in
# gpu family with its computed crossover. Run from the repository root on a
# machine with a CUDA device and CuPy + PyTorch; perfctl installed (pip install -e .).
# Figures go to $OUT (default /tmp/perfctl-gpu). Each step is bounded by `timeout`.
set -u
OUT=${OUT:-/tmp/perfctl-gpu}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 COLUMNS=180
REPO=$PWD
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider -s tests/test_builtin_regimes.py
P=$(mktemp -d) && cd "$P" && git init -q -b main
printf '[project]\nname="p"\nversion="0"\n\n[tool.perfctl]\nregimes = ["bench.py"]\ninstall = false\ninherit_site_packages = true\n' > pyproject.toml
cp "$REPO/benchmarks/gpu_check_regimes.py" bench.py; cp "$REPO/benchmarks/gpu_check_kern_v1.py" kern.py
git add -A && git -c user.email=a@b -c user.name=n commit -qm "v1: one add" && git tag v1
cp "$REPO/benchmarks/gpu_check_kern_v2.py" kern.py && git -c user.email=a@b -c user.name=n commit -qam "v2: add, sqrt, add" && git tag v2
timeout 200 python3 -m perfctl compare v1 v2 --fast 2>&1 | tee "$OUT/compare_v1_v2.txt"
timeout 200 python3 -m perfctl run --regimes builtin:gpu --regime 'gpu.page_apply*' --processes 3 --values 3 2>&1 | tee "$OUT/run_page_apply.txt"
timeout 300 python3 -m perfctl run --regimes builtin:gpu --regime 'gpu.xor_kernel*' --regime 'gpu.h2d*' --regime 'gpu.launch*' --processes 3 --values 3 2>&1 | tee "$OUT/run_device.txt"
