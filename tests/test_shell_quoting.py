"""Every command perfctl suggests is safe to paste into a shell (#13.6).

A git ref may contain ``$( )`` and ``${IFS}``; a path may contain anything. Each
test pastes a printed command into a real ``bash -c`` (with ``perfctl`` a shell
function that prints its arguments) and checks that the payload did not run and
that the arguments arrive as they were meant. These run in the gate (`.ci/run`).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from perfctl.model import REGRESSED
from perfctl.plan.blocks import baseline_lines
from perfctl.plan.spec import Phase, PlanSpec
from perfctl.plan.state import PhaseState
from perfctl.profile.links import profile_command
from tests.conftest import GitRepo, run_cli
from tests.test_comment import comparison, regime


def payload(tmp_path: Path) -> tuple[str, Path]:
    """A valid git branch name that creates ``pwned`` when a shell expands it."""
    pwned = tmp_path / "pwned"
    return f"q$(touch${{IFS}}{pwned})", pwned


def paste(command: str, cwd: Path | None = None) -> list[str]:
    """Run ``command`` in bash, `perfctl` printing one argument per line."""
    script = 'perfctl() { printf "%s\\n" "$@"; }\n' + command
    out = subprocess.run(
        ["bash", "-c", script], cwd=cwd, capture_output=True, text=True, check=True
    )
    return out.stdout.splitlines()


def backticked(text: str, start: str = "perfctl ") -> str:
    """The first `perfctl ...` code span in ``text``."""
    found = re.search(r"`(" + re.escape(start) + r"[^`]*)`", text)
    assert found, text
    return found.group(1)


def test_the_from_store_hint_quotes_the_refs(git_repo: GitRepo, tmp_path: Path) -> None:
    ref, pwned = payload(tmp_path)
    git_repo.write("pyproject.toml", '[tool.perfctl]\nregimes = ["r.py"]\n')
    git_repo.commit("first")
    git_repo.git("branch", ref)
    git_repo.commit("second")  # two commits: the same one on both sides has its own hint
    proc = run_cli("compare", "main", ref, "--from-store", cwd=git_repo.path)
    assert proc.returncode == 2, proc.stderr
    hint = proc.stderr.splitlines()[-1]
    assert hint.startswith("Hint: Measure them together with `perfctl compare main '")
    assert paste(backticked(hint)) == ["compare", "main", ref]
    assert not pwned.exists()


def test_the_plan_source_run_block_quotes_the_refs(tmp_path: Path) -> None:
    ref, pwned = payload(tmp_path)
    phase = Phase("1", "one", before="main", after=ref)
    spec = PlanSpec((phase,), "1")
    c = comparison([regime("hot", REGRESSED, change=0.3)])
    lines = baseline_lines(spec, PhaseState(phase, "completed", None, None, c, ()))
    fence = lines.index("```bash")
    command = lines[fence + 1]
    assert lines[fence + 2] == "```"
    assert paste(command) == ["compare", "main", ref]
    assert not pwned.exists()


def test_a_custom_source_template_gets_quoted_refs(tmp_path: Path) -> None:
    ref, pwned = payload(tmp_path)
    phase = Phase("1", "one", before=ref, after="HEAD")
    spec = PlanSpec((phase,), "1", source="perfctl compare {before} {after} --rigorous")
    assert paste(spec.command(phase)) == ["compare", ref, "HEAD", "--rigorous"]
    assert not pwned.exists()


PHASE = """
[[tool.perfctl.plan.phases]]
id = 1
name = "one"
before = "main"
after = "HEAD"
regimes = ["hot"]
"""


def test_plan_hints_and_skeleton_quote_the_path(tmp_path: Path) -> None:
    root, sandbox = tmp_path / "proj", tmp_path / "sandbox"
    root.mkdir()
    sandbox.mkdir()
    (root / "pyproject.toml").write_text('[tool.perfctl]\nregimes = ["r.py"]\n' + PHASE)
    plan = "q$(touch${IFS}pwned).md"  # a file name: no slash in the payload
    init = run_cli("plan", "init", plan, cwd=root)
    assert init.returncode == 0, init.stderr
    skeleton = (root / plan).read_text()
    for text in (init.stderr, skeleton):
        assert paste(backticked(text), cwd=sandbox) == ["plan", "update", plan]
    (root / plan).unlink()
    update = run_cli("plan", "update", plan, cwd=root)
    assert update.returncode == 2, update.stderr
    assert paste(backticked(update.stderr), cwd=sandbox) == ["plan", "init", plan]
    assert not (sandbox / "pwned").exists()


def test_the_report_profile_command_quotes_the_regime(tmp_path: Path) -> None:
    name, pwned = payload(tmp_path)
    c = comparison([regime("hot", REGRESSED, change=0.3)])
    words = paste(profile_command(name, c))
    assert words[:2] == ["profile", name] and words[2] == "--ref"
    assert not pwned.exists()
