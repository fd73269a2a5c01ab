"""User-named output paths: a regular file or a new path, nothing else (#13.4).

`report -o`, `plan init/update` and `ci --artifacts` write with a temporary file
renamed over the target; a rename replaces a symlink, a FIFO or a device. These
run in the gate (`.ci/run`): none is marked slow.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from perfctl.errors import UsageError
from perfctl.files import check_output_dir, check_output_file, write_output
from perfctl.store.local import open_store
from tests.conftest import run_cli
from tests.test_report import make_comparison


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project with one stored comparison."""
    root = tmp_path / "proj"
    root.mkdir()
    (root / "pyproject.toml").write_text('[tool.perfctl]\nregimes = ["r.py"]\n')
    open_store(root / ".perfctl").save_comparison(make_comparison(families=1, per_family=2))
    return root


def _refused(proc: object, what: str) -> list[str]:
    assert proc.returncode == 2, proc.stderr  # type: ignore[attr-defined]
    assert proc.stdout == ""  # type: ignore[attr-defined]
    lines = proc.stderr.splitlines()  # type: ignore[attr-defined]
    assert len(lines) == 2 and lines[0].startswith("Error: refusing to write ")
    assert what in lines[0] and lines[1].startswith("Hint: ")
    return lines


def test_report_refuses_a_symlink_and_leaves_its_target_alone(project: Path) -> None:
    victim = project / "victim.txt"
    victim.write_text("precious\n")
    link = project / "out.html"
    link.symlink_to(victim)
    proc = run_cli("report", "--last", "-o", str(link), cwd=project)
    _, hint = _refused(proc, "it is a symbolic link")
    assert (
        hint
        == "Hint: name the file the link points to, or remove the link; `-o -` writes to stdout"
    )
    assert link.is_symlink() and victim.read_text() == "precious\n"


def test_report_refuses_a_fifo(project: Path) -> None:
    fifo = project / "pipe.html"
    os.mkfifo(fifo)
    proc = run_cli("report", "--last", "-o", str(fifo), cwd=project, timeout=60)
    _refused(proc, "it is a FIFO")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)  # still the FIFO, not a file renamed over it


def test_report_refuses_a_directory(project: Path) -> None:
    proc = run_cli("report", "--last", "-o", str(project), cwd=project)
    _, hint = _refused(proc, "it is a directory")
    assert hint.startswith(f"Hint: name a file inside it, e.g. {project / 'report.html'}")


def test_report_dash_writes_the_html_to_stdout(project: Path) -> None:
    proc = run_cli("report", "--last", "-o", "-", cwd=project)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.lstrip().startswith("<!DOCTYPE html>")
    assert not (project / "-").exists()


def test_report_writes_a_new_path_and_replaces_a_regular_file(project: Path) -> None:
    out = project / "r.html"
    for _ in range(2):
        proc = run_cli("report", "--last", "-o", str(out), cwd=project)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout == f"{out}\n" and stat.S_ISREG(os.lstat(out).st_mode)


def test_plan_update_refuses_a_symlinked_plan(project: Path) -> None:
    victim = project / "victim.md"
    victim.write_text("precious\n")
    (project / "PLAN.md").symlink_to(victim)
    proc = run_cli("plan", "update", "PLAN.md", cwd=project)
    _refused(proc, "the plan to PLAN.md: it is a symbolic link")
    assert victim.read_text() == "precious\n"


def test_plan_init_refuses_a_dangling_symlink(project: Path) -> None:
    (project / "PLAN.md").symlink_to(project / "elsewhere.md")
    proc = run_cli("plan", "init", "PLAN.md", "--force", cwd=project)
    _refused(proc, "it is a symbolic link")
    assert not (project / "elsewhere.md").exists()


def test_ci_refuses_a_symlinked_artifacts_folder_before_measuring(project: Path) -> None:
    elsewhere = project / "elsewhere"
    elsewhere.mkdir()
    (project / "art").symlink_to(elsewhere, target_is_directory=True)
    proc = run_cli("ci", "--artifacts", "art", cwd=project)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("Error: refusing to write the --artifacts folder into art:")
    assert list(elsewhere.iterdir()) == []


@pytest.mark.parametrize("path", ["/dev/null", "/dev/full"])
def test_devices_are_refused_without_touching_them(path: str) -> None:
    if not os.path.exists(path):
        pytest.skip(f"{path} does not exist here")
    with pytest.raises(UsageError, match="it is a character device, not a regular file"):
        check_output_file(Path(path), "the report")


def test_write_output_refuses_a_fifo_and_names_unwritable_paths(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(UsageError, match="it is a FIFO"):
        write_output(fifo, "x")
    afile = tmp_path / "file"
    afile.write_text("x")
    with pytest.raises(UsageError, match="[Nn]ot a directory"):
        check_output_file(afile / "sub" / "out.html")
    with pytest.raises(UsageError, match="it is a FIFO"):
        check_output_dir(fifo)
    assert check_output_dir(tmp_path / "new") == tmp_path / "new"


def test_init_refuses_a_planted_workflow_symlink(tmp_path: Path) -> None:
    victim = tmp_path / "victim.sh"
    victim.write_text("precious\n")
    workflows = tmp_path / "proj" / ".github" / "workflows"
    workflows.mkdir(parents=True)
    (workflows / "perfctl.yml").symlink_to(victim)
    root = tmp_path / "proj"
    proc = run_cli("init", "--ci", "github", "--force", "-C", str(root), cwd=root)
    assert proc.returncode == 2, proc.stderr
    assert "it is a symbolic link" in proc.stderr
    assert victim.read_text() == "precious\n" and not (root / "pyproject.toml").exists()
