"""`perfctl demo --quick` end to end: a real repo, compare, profile, report, plan."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conftest import run_cli

pytestmark = pytest.mark.slow
GOLDEN = Path(__file__).parent / "golden" / "demo_structure.txt"


def structure(root: Path, profiled: str) -> str:
    """The demo's written files and PLAN.md's headings/markers, numbers stripped.

    The profiled regime is the most-improved one, which two ~100x phases take in
    turns from machine to machine: its directory is shown as ``<most-improved>``.
    """
    files = sorted(
        str(p.relative_to(root)).replace(f"profiles/{profiled}/", "profiles/<most-improved>/")
        for p in root.rglob("*")
        if p.is_file()
        and not {".git", ".perfctl", "__pycache__"} & set(p.parts)
        and "egg-info" not in str(p)
        and "/build/" not in f"/{p.relative_to(root)}"
    )
    plan = (root / "PLAN.md").read_text(encoding="utf-8").splitlines()
    outline = [ln for ln in plan if ln.startswith("#") or ln.startswith("<!-- perfctl:")]
    outline = [re.sub(r"[0-9a-f]{40}|\d+=[0-9a-f]+", "…", ln) for ln in outline]
    return "\n".join(["# files", *files, "# PLAN.md outline", *outline]) + "\n"


def test_demo_quick(tmp_path: Path) -> None:
    root = tmp_path / "demo"
    proc = run_cli("demo", str(root), "--quick", cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "Artefacts" in out and str(root / "PLAN.md") in out
    tags = (root / ".git").exists() and run_git(root, "tag").split()
    assert tags == ["phase-0", "phase-1", "phase-2", "phase-3", "phase-4"]
    comparisons = json.loads(run_cli("runs", "--format", "json", cwd=root).stdout)
    assert len(comparisons) >= 10  # two runs per comparison, five comparisons
    # Honest numbers: the bulk-transport and batching phases are ~100x effects.
    c = json.loads((root / ".perfctl" / "comparisons").glob("*.json").__next__().read_text())
    assert c["base"]["ref"] and c["head"]["ref"]
    table = out.split("Phases")[1]
    for regime in ("payload_large_sum", "increment_small"):
        line = next(ln for ln in table.splitlines() if regime in ln)
        assert "improved" in line, line
    html = (root / "reports" / "comparison.html").read_text(encoding="utf-8")
    assert "payload_large_sum" in html and "plotly" in html.lower()
    plan = (root / "PLAN.md").read_text(encoding="utf-8")
    assert "Completed (2026-01-11)" in plan and "✅ met" in plan
    # A second plan update with no new data changes nothing.
    again = run_cli("plan", "update", "PLAN.md", "--check", cwd=root)
    assert again.returncode == 0, again.stderr
    # The profile is of the most-improved regime of the first-vs-last comparison.
    stored = [json.loads(p.read_text()) for p in (root / ".perfctl" / "comparisons").glob("*.json")]
    first_last = next(
        x for x in stored if (x["base"]["ref"], x["head"]["ref"]) == ("phase-0", "phase-4")
    )
    improved = [r for r in first_last["regimes"] if r["verdict"] == "improved"]
    profiled = min(improved, key=lambda r: r["change"])["name"]
    assert (root / "reports" / "profiles" / profiled / "phase-0-vs-phase-4" / "diff.svg").is_file()
    got = structure(root, profiled)
    if not GOLDEN.exists() or __import__("os").environ.get("PERFCTL_UPDATE_GOLDEN"):
        GOLDEN.write_text(got, encoding="utf-8")
    assert got == GOLDEN.read_text(encoding="utf-8")


def run_git(root: Path, *args: str) -> str:
    """git's stdout in the demo repo."""
    import subprocess

    return subprocess.run(
        ["git", *args], cwd=root, capture_output=True, text=True, check=True
    ).stdout
