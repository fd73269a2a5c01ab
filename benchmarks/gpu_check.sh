#!/usr/bin/env bash
# GPU validation of perfctl (issues 18, 17): the gpu-marked tests, a compare of two refs
# where one makes a CuPy kernel slower (timed with CUDA events), a bisect that finds that
# commit in a 16-commit line (device clock, with its py-spy differential), and the built-in
# gpu family with its computed crossover. Run from the repository root on a machine with a
# CUDA device and CuPy + PyTorch; perfctl installed with its test tools (pip install -e
# '.[dev]'; the unit tier imports psycopg). On a machine that reaches no package index but
# has CuPy, PyTorch, numpy, scipy, pandas, rich, click, shellingham, jinja2, httpx, pytest,
# pytest-timeout and pytest-xdist (the 'cuda' image here does): carry wheels of pyperf,
# py-spy, plotly, GitPython, gitdb, smmap, psycopg, psycopg-binary and typer<0.29,
# `pip install --no-deps --target /tmp/site` them, and run with
# PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH. (On 2026-11-27 the run steps needed
# a .pth instead: `perfctl run` with install = false dropped that PYTHONPATH from its
# workers; fixed since.)
# Figures go to $OUT (default /tmp/perfctl-gpu). Each step is bounded by `timeout`;
# STEPS picks steps (default: all of "tests compare bisect page_apply device"). Exits 1
# when a step failed or timed out, or a gpu test skipped (naming them), else 0.
set -uo pipefail
OUT=${OUT:-/tmp/perfctl-gpu}; mkdir -p "$OUT"
ALL="tests compare bisect page_apply device"
STEPS=${STEPS:-$ALL}
for s in $STEPS; do
  case " $ALL " in *" $s "*) ;; *) echo "unknown step '$s' (steps: $ALL)" >&2; exit 2 ;; esac
done
export PYTHONUNBUFFERED=1 COLUMNS=180
REPO=$PWD
FAILED=""
step() { case " $STEPS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
failed() { FAILED="$FAILED $1"; echo "gpu_check: step $1 failed" >&2; }
commit() { git -c user.email=a@b -c user.name=n commit -qam "$1"; }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
if step tests; then
  timeout 120 python3 -m pytest -q -rs -n 0 -m gpu -p no:cacheprovider -s tests/test_builtin_regimes.py \
    2>&1 | tee "$OUT/tests.txt" || failed tests
  grep -q skipped "$OUT/tests.txt" && failed tests-skipped
  # The unit tier on a GPU machine: no test may start nvidia-smi or read the GPU as absent.
  timeout 300 python3 -m pytest -q -m unit -p no:cacheprovider tests 2>&1 | tail -5 || failed unit
fi
P=$(mktemp -d) && cd "$P" && git init -q -b main
printf '[project]\nname="p"\nversion="0"\n\n[tool.perfctl]\nregimes = ["bench.py"]\ninstall = false\ninherit_site_packages = true\n' > pyproject.toml
cp "$REPO/benchmarks/gpu_check_regimes.py" bench.py; cp "$REPO/benchmarks/gpu_check_kern_v1.py" kern.py
echo "notes" > NOTES.md
git add -A && git -c user.email=a@b -c user.name=n commit -qm "v1: one add" && git tag v1
if step compare; then
  git checkout -q -b two && cp "$REPO/benchmarks/gpu_check_kern_v2.py" kern.py && commit "v2: add, sqrt, add" && git tag v2
  timeout 200 python3 -m perfctl compare v1 v2 --fast 2>&1 | tee "$OUT/compare_v1_v2.txt" || failed compare
  git checkout -q main
fi
if step bisect; then
  # 15 commits after v1: docs only, except the 9th, which makes the kernel three passes.
  for i in $(seq 1 15); do
    if [ "$i" = 9 ]; then cp "$REPO/benchmarks/gpu_check_kern_v2.py" kern.py && commit "kernel: add, sqrt, add"
    else echo "note $i" >> NOTES.md && commit "docs: note $i"; fi
  done
  echo "culprit: $(git log --format='%h %s' --grep='^kernel:')" | tee "$OUT/bisect.txt"
  timeout 300 python3 -m perfctl bisect v1 main --regime 'kernel*16M*' --fast --profile 2>&1 | tee -a "$OUT/bisect.txt" || failed bisect
  timeout 60 python3 -m perfctl bisect v1 main --regime 'kernel*16M*' --fast --format json > "$OUT/bisect.json" 2>>"$OUT/bisect.txt" || failed bisect-json
fi
if step page_apply; then
  timeout 150 python3 -m perfctl run --regimes builtin:gpu --regime 'gpu.page_apply*' --processes 3 --values 3 2>&1 | tee "$OUT/run_page_apply.txt" || failed page_apply
fi
if step device; then
  timeout 300 python3 -m perfctl run --regimes builtin:gpu --regime 'gpu.xor_kernel*' --regime 'gpu.h2d*' --regime 'gpu.launch*' --processes 3 --values 3 2>&1 | tee "$OUT/run_device.txt" || failed device
fi
if [ -n "$FAILED" ]; then echo "gpu_check: failed:$FAILED" >&2; exit 1; fi
echo "gpu_check: all steps passed ($STEPS)"
