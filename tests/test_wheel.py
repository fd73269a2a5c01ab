"""The built wheel ships regimes/ and templates/ inside the package and runs."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_wheel_installs_and_lists_builtin_regimes(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(dist),
            str(ROOT),
        ],
        check=True,
    )
    (wheel,) = dist.glob("perfctl-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert any(n.startswith("perfctl/regimes/builtin/") and n.endswith(".py") for n in names)
    assert any(n.startswith("perfctl/render/templates/") for n in names)
    assert "perfctl/data/demo/phases.json" in names  # the demo project ships too
    assert "perfctl/measure/workers/bench.py" in names and "perfctl/cli/compare.py" in names
    assert not any(n.startswith("regimes/") or n.startswith("templates/") for n in names)
    # A fresh venv that installs perfctl itself from the wheel (non-editable) and
    # borrows the test environment's dependencies through a .pth file, which is
    # read after the venv's own site-packages (and skips the editable finder).
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    purelib = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    )
    parent = sysconfig.get_paths()["purelib"]
    Path(purelib.stdout.strip(), "_deps.pth").write_text(parent + "\n")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(py),
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            str(wheel),
        ],
        check=True,
    )
    where = subprocess.run(
        [str(py), "-c", "import perfctl; print(perfctl.__file__)"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    assert str(venv) in where.stdout
    project = tmp_path / "user-project"
    project.mkdir()
    (project / "pyproject.toml").write_text('[project]\nname = "x"\nversion = "0"\n')
    proc = subprocess.run(
        [str(venv / "bin" / "perfctl"), "list", "--regimes", "builtin", "--format", "json"],
        cwd=project,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert str(venv) in proc.stdout  # regime sources come from the installed package
    assert '"family": "ipc"' in proc.stdout
