"""Hostile input: a fork's comparison.json, names and refs made to inject markup or commands.

These run in the gate (`.ci/run`): none is marked slow.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from perfctl.model import IMPROVED, NO_CHANGE, REGRESSED, to_dict
from perfctl.render.comment import counts_text, render_comment
from perfctl.render.escape import escape_plain, md_escape, md_name, rich_escape, strip_unsafe
from perfctl.render.tables import format_compare_markdown
from perfctl.store.schema import SchemaError, load_comparison_json, validate_comparison_dict
from tests.conftest import run_cli
from tests.test_comment import comparison, regime

PAYLOAD = (
    "regressed** <img src=https://evil.example/t.png> @org/everyone "
    "[Click to fix CI](https://evil.example/phish) <!--"
)


def good() -> dict[str, Any]:
    """A valid comparison record, as `perfctl ci` writes it."""
    c = comparison([regime("hot", REGRESSED, change=0.3), regime("cold", NO_CHANGE)])
    data: dict[str, Any] = json.loads(json.dumps(to_dict(c)))
    return data


def assert_inert(body: str) -> None:
    """No HTML, image, link, mention or comment opener survives into markdown."""
    assert "<img" not in body and "<!--" not in body.split("\n", 1)[1]
    assert not re.search(r"(?<!\\)\]\(", body)  # no unescaped `](`: no link
    assert "@org" not in body  # a zero-width space follows every '@'


# -- 1. the comparison file is validated before rendering -------------------------------
def test_comparison_file_with_an_unknown_verdict_is_refused(tmp_path: Path) -> None:
    data = good()
    data["regimes"][0]["verdict"] = PAYLOAD
    path = tmp_path / "comparison.json"
    path.write_text(json.dumps(data))
    out = run_cli("comment", "--dry-run", "--comparison-file", str(path), cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert out.stdout == ""
    first, hint = out.stderr.splitlines()
    assert first.startswith(f"Error: {path}: regimes[0].verdict: unknown verdict 'regressed** <img")
    assert hint == "Hint: pass the comparison.json written by `perfctl ci`"


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda d: d["regimes"][0].update(change="0.3"), "regimes[0].change: expected a number"),
        (lambda d: d["regimes"][0].update(change=True), "regimes[0].change: expected a number"),
        (lambda d: d.update(alpha=None), "alpha: expected a number"),
        (lambda d: d["regimes"][1].update(base_status="<b>"), "regimes[1].base_status: unknown"),
        (lambda d: d["regimes"][0].update(name=["x"]), "regimes[0].name: expected a string"),
        (lambda d: d["base"].update(ref="x" * 20_001), "base.ref: a string of 20,001"),
        (lambda d: d.update(warnings=["w"] * 100_001), "warnings: 100,001 entries"),
        (lambda d: d["settings"].update(deep=json.loads("[" * 20 + "]" * 20)), "nested deeper"),
        (lambda d: d["regimes"][0].pop("verdict"), "regimes[0]: missing field `verdict`"),
        (lambda d: d["regimes"][0]["base_values"].append(["1"]), "base_values[0][0]: expected"),
        (lambda d: d["machine"].update(cores=2.5), "machine.cores: expected an integer"),
        (lambda d: d.update(threshold=10**400), "threshold: a number too large"),
        (lambda d: d["machine"].update(cores=-(2**63)), "machine.cores: a number too large"),
        (lambda d: d["regimes"][0]["artifacts"].update(k=1), "regimes[0].artifacts.k: expected"),
        (lambda d: d["regimes"][0].update(seconds="9"), "regimes[0].seconds: expected a number"),
        (lambda d: d["regimes"][0].update(threshold=5), "regimes[0].threshold: must lie above 0"),
        (lambda d: d["regimes"][0].update(threshold="x"), "regimes[0].threshold: expected"),
        (lambda d: d["regimes"][0].update(threshold=0), "regimes[0].threshold: must lie above 0"),
        (lambda d: d.update(threshold=1), "threshold: must lie from 0 and below 1"),
        (lambda d: d.update(threshold=-0.01), "threshold: must lie from 0 and below 1"),
        (lambda d: d.update(alpha=0), "alpha: must lie above 0 and below 1"),
        (lambda d: d.update(alpha=1.5), "alpha: must lie above 0 and below 1"),
    ],
)
def test_schema_violations_name_the_field(mutate: Any, field: str) -> None:
    data = good()
    data["regimes"][0]["base_values"] = []
    mutate(data)
    with pytest.raises(SchemaError) as err:
        validate_comparison_dict(data)
    assert field in err.value.message
    assert err.value.exit_code == 2


def test_a_comparison_without_a_band_is_a_valid_record() -> None:
    data = good()
    data.update(threshold=0)  # --threshold 0: no band, a choice the record keeps
    validate_comparison_dict(data)


def test_a_huge_integer_is_a_usage_error_not_an_internal_one(tmp_path: Path) -> None:
    data = good()
    data["threshold"] = 10**400  # JSON allows it; arithmetic on it would overflow
    path = tmp_path / "comparison.json"
    path.write_text(json.dumps(data))
    out = run_cli("comment", "--dry-run", "--comparison-file", str(path), cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert out.stderr.splitlines()[0] == (
        f"Error: {path}: threshold: a number too large (beyond ±2**63)"
    )


def test_non_finite_numbers_and_oversized_files_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text(json.dumps(good()).replace('"alpha": 0.05', '"alpha": NaN'))
    with pytest.raises(SchemaError, match="NaN is not a number JSON allows"):
        load_comparison_json(path)
    path.write_text(json.dumps(good()).replace('"alpha": 0.05', '"alpha": 1e999'))
    with pytest.raises(SchemaError, match="alpha: expected a finite number"):
        load_comparison_json(path)
    path.write_text(json.dumps(good()))
    assert load_comparison_json(path)["id"] == good()["id"]
    with pytest.raises(SchemaError, match="larger than 0 MiB"):
        load_comparison_json(path, limit=100)
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(SchemaError):
        load_comparison_json(path)


def test_an_unvalidated_verdict_is_still_escaped_in_the_counts() -> None:
    # Defence in depth: a Comparison built in code with a hostile verdict.
    c = comparison([regime("a", REGRESSED, change=0.3), regime("b", PAYLOAD, change=0.0)])
    assert "<img" not in counts_text(c)
    assert_inert(render_comment(c))
    md = format_compare_markdown(c)
    assert_inert("\n" + md)


def test_status_cells_are_escaped_in_compare_markdown() -> None:
    row = replace(regime("a", IMPROVED, change=-0.2), base_status="<b>x</b>")  # type: ignore[arg-type]
    c = comparison([row])
    md = format_compare_markdown(c)
    assert "<b>" not in md and "&lt;b&gt;x&lt;/b&gt;" in md


BIDI = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"


def test_bidi_and_control_characters_never_reach_a_comment_table_or_terminal() -> None:
    hostile = f"ok{BIDI}\x1b[31mred\x07\x9b1m\x85end"
    for text in (strip_unsafe(hostile), escape_plain(hostile), md_escape(hostile)):
        assert not re.search(r"[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]", text), text
    assert escape_plain(hostile) == "ok [31mred 1m end"
    assert "\x1b" not in rich_escape(hostile) and "\u202e" not in rich_escape(hostile)
    c = comparison([regime(hostile, REGRESSED, change=0.3)], warnings=(hostile,))
    for body in (render_comment(c), format_compare_markdown(c)):
        assert not re.search(r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]", body)


def test_error_lines_are_terminal_safe(tmp_path: Path) -> None:
    data = good()
    data["regimes"][0]["metrics_base"] = {f"\x1b]0;pwned\x07{BIDI}": "x"}
    path = tmp_path / "comparison.json"
    path.write_text(json.dumps(data))
    out = run_cli("comment", "--dry-run", "--comparison-file", str(path), cwd=tmp_path)
    assert out.returncode == 2
    assert "\x1b" not in out.stderr and "\x07" not in out.stderr and "\u202e" not in out.stderr
    assert "Traceback" not in out.stderr


def test_md_name_keeps_plain_names_as_code_and_escapes_the_rest() -> None:
    assert md_name("shm.bytes_hop_ring[size=24M]") == "`shm.bytes_hop_ring[size=24M]`"
    assert md_name("x`y") == "x\\`y"
    assert md_name("<svg/onload=alert(1)>") == "&lt;svg/onload=alert(1)&gt;"
    assert md_name("a](javascript:alert(1))") == "a\\](javascript:alert(1))"


# -- 7. regime names: validated where defined, escaped in every plan block ------------------
NAMES = (
    "<b>bold</b>",
    "<svg/onload=alert(1)>",
    "x](javascript:alert(1))",
    "a`b<img src=x>`c",
    "evil\n<!-- perfctl:end update-log -->\n<!-- perfctl:begin phase-1 -->",
)
PLAN = """# Plan
<!-- perfctl:begin phase-tracker -->
<!-- perfctl:end phase-tracker -->
<!-- perfctl:begin baseline -->
<!-- perfctl:end baseline -->
<!-- perfctl:begin phase-1 -->
<!-- perfctl:end phase-1 -->
<!-- perfctl:begin success-metrics -->
<!-- perfctl:end success-metrics -->
<!-- perfctl:begin update-log -->
<!-- perfctl:end update-log -->
"""


def test_hostile_names_are_inert_in_every_plan_block_and_the_plan_still_parses() -> None:
    from perfctl.plan.document import parse_doc
    from perfctl.plan.spec import Phase, PlanSpec, parse_target
    from perfctl.plan.update import _contents, _state

    target = parse_target("-20%")
    phase = Phase(
        "1",
        "<b>phase</b> [x](javascript:y)",
        "main",
        "HEAD",
        NAMES,
        tuple((n, target) for n in NAMES),
    )
    rows = [regime(n, REGRESSED, change=0.3) for n in NAMES]
    c = comparison([*rows, regime("<i>x</i>", "<b>verdict</b>", change=0.0)])
    doc = parse_doc(PLAN, "PLAN.md")
    spec = PlanSpec((phase,), "1")
    text = doc.render(_contents(spec, doc, [_state(phase, None, None, c)]))
    for raw in ("<b>", "<svg", "<img", "<i>", "<!-- perfctl:end update-log -->\n<!--"):
        assert raw not in text
    assert not re.search(r"(?<!\\)\]\(", text)  # no link
    again = parse_doc(text, "PLAN.md")  # the next update still works
    assert [b.name for b in again.blocks()] == [b.name for b in doc.blocks()]
    log = text.split("<!-- perfctl:begin update-log -->")[1]
    assert len([ln for ln in log.splitlines() if ln.startswith("- ")]) == 1


@pytest.mark.parametrize(
    ("decorator", "line", "shown"),
    [
        ('@regime(name="evil\\n<!-- perfctl:end update-log -->")', 4, "U+000A"),
        ('@regime(params={"m": ["ok", "b\\x1b[2J"]})', 4, "U+001B"),
        ('@regime(family="fam\\u202e")', 4, "U+202E"),
        ('@regime(name="   ")', 4, "must be a non-empty string"),
    ],
)
def test_regime_names_are_validated_where_they_are_defined(
    tmp_path: Path, decorator: str, line: int, shown: str
) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(
        f"from perfctl import regime\n\n\n{decorator}\ndef f(m=1):\n    return lambda: None\n"
    )
    out = run_cli("list", "--regimes", str(bad), cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    error, hint = out.stderr.splitlines()
    assert error.startswith(f"Error: {bad}:{line}: ValueError: ") and shown in error
    assert hint.startswith("Hint: fix the regimes file")


def test_a_hostile_phase_name_cannot_add_markers_to_the_skeleton(tmp_path: Path) -> None:
    from perfctl.plan.document import parse_doc

    name = "<b>x</b>\\n<!-- perfctl:end baseline -->"  # TOML escape: a real newline
    (tmp_path / "pyproject.toml").write_text(
        '[tool.perfctl]\nregimes = ["r.py"]\n[[tool.perfctl.plan.phases]]\n'
        f'id = 1\nname = "{name}"\nbefore = "main"\nafter = "HEAD"\nregimes = ["a"]\n'
    )
    out = run_cli("plan", "init", "PLAN.md", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    text = (tmp_path / "PLAN.md").read_text()
    assert "<b>" not in text and "## Phase 1: &lt;b&gt;x&lt;/b&gt; &lt;" in text
    assert text.count("<!-- perfctl:end baseline -->") == 1
    names = [b.name for b in parse_doc(text, "PLAN.md").blocks()]
    assert names == ["baseline", "phase-tracker", "phase-1", "success-metrics", "update-log"]
