"""The PR comment body: layout (golden files), escaping, truncation, markers."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

from perfctl import __version__
from perfctl.errors import UsageError
from perfctl.model import (
    FAILED,
    IMPROVED,
    INCONCLUSIVE,
    NO_CHANGE,
    REGRESSED,
    SKIPPED,
    WITHIN_NOISE,
    Comparison,
    Machine,
    RefInfo,
    RegimeComparison,
    SideStats,
    Status,
)
from perfctl.render.comment import (
    GITHUB_LIMIT,
    CommentOptions,
    artifact_url,
    check_url_base,
    github_length,
    has_changes,
    headline,
    marker,
    render_comment,
    with_marker,
)
from perfctl.render.tables import format_compare_markdown, md_escape

GOLDEN = Path(__file__).parent / "golden"
MACHINE = Machine(
    id="m1",
    cpu_model="Test CPU @ 2.0GHz",
    cores=2,
    memory_bytes=8 * 2**30,
    kernel="6.1.0",
    governor="performance",
    python="3.11.7",
)
BASE = RefInfo(ref="main", sha="a" * 40, subject="Base commit")
HEAD = RefInfo(ref="feature", sha="b" * 40, subject="Make it faster")


def side(median: float) -> SideStats:
    """SideStats around a median (seconds per op)."""
    return SideStats(
        median_s=median,
        q1_s=median * 0.99,
        q3_s=median * 1.01,
        ci_low_s=median * 0.98,
        ci_high_s=median * 1.02,
        cv=0.02,
        n_processes=10,
    )


def regime(
    name: str, verdict: str, base: float = 1e-6, change: float | None = 0.0, **kw: Any
) -> RegimeComparison:
    """One RegimeComparison with plausible numbers for its verdict."""
    if verdict == FAILED:
        return RegimeComparison(
            name=name,
            family="demo",
            verdict=FAILED,
            head_status=Status.FAILED,
            base=side(base),
            reason=str(kw.pop("reason", "boom")),
            **kw,
        )
    if verdict == SKIPPED:
        return RegimeComparison(
            name=name,
            family="demo",
            verdict=SKIPPED,
            reason="needs a GPU",
            base_status=Status.SKIPPED,
            head_status=Status.SKIPPED,
        )
    assert change is not None
    return RegimeComparison(
        name=name,
        family="demo",
        verdict=verdict,  # type: ignore[arg-type]  # hostile tests pass any word
        base=side(base),
        head=side(base * (1 + change)),
        change=change,
        ci_low=change - 0.01,
        ci_high=change + 0.01,
        p_value=0.001,
        p_adjusted=0.004,
        **kw,
    )


def comparison(regimes: list[RegimeComparison], **kw: object) -> Comparison:
    """A Comparison with fixed provenance (golden files must not drift)."""
    fields: dict[str, object] = {
        "id": "20261121T120000-abcdef",
        "created": "2026-11-21T12:00:00",
        "base": BASE,
        "head": HEAD,
        "machine": MACHINE,
    }
    fields.update(kw)
    return Comparison(regimes=tuple(regimes), **fields)  # type: ignore[arg-type]


def mixed() -> Comparison:
    return comparison(
        [
            regime(
                "ipc.echo[size=64]",
                REGRESSED,
                2.5e-6,
                0.25,
                artifacts={"diff_flame": "/proj/reports/ci/profiles/echo-diff.svg"},
            ),
            regime("ipc.batch", IMPROVED, 1.2e-3, -0.4),
            regime("startup", FAILED, 0.5, reason="ImportError: no module named fast"),
            regime("parse", WITHIN_NOISE, 3e-5, 0.012),
            regime("render", NO_CHANGE, 8e-9, 0.001),
            regime("gpu.kernel", SKIPPED),
            regime("io.flush", INCONCLUSIVE, 4e-4, 0.05, reason="too noisy (CV 18%)"),
        ],
        warnings=("base and head ran on a busy machine",),
    )


def check_golden(name: str, text: str) -> None:
    """Compare with tests/golden/NAME; PERFCTL_UPDATE_GOLDEN=1 rewrites it."""
    path = GOLDEN / name
    text = text.replace(f"perfctl {__version__}", "perfctl VERSION")  # no drift on releases
    if os.environ.get("PERFCTL_UPDATE_GOLDEN"):
        path.write_text(text, encoding="utf-8")
    assert text == path.read_text(encoding="utf-8")


# -- golden layouts ---------------------------------------------------------------
def test_golden_mixed_comment_with_links() -> None:
    opts = CommentOptions(
        url_base="https://perf.example.org/run-7", artifact_root=Path("/proj/reports/ci")
    )
    check_golden("comment_mixed.md", render_comment(mixed(), opts))


def test_golden_no_change_comment() -> None:
    c = comparison(
        [regime("parse", WITHIN_NOISE, 3e-5, 0.012), regime("render", NO_CHANGE, 8e-9, 0.001)]
    )
    check_golden("comment_no_change.md", render_comment(c, CommentOptions(marker_id="gpu")))


def test_layout_puts_marker_then_verdict_first() -> None:
    lines = render_comment(mixed()).splitlines()
    assert lines[0] == "<!-- perfctl:comment -->"
    assert lines[1] == "### ❌ 1 regression, 1 failed, 1 improvement"
    assert lines[3] == (
        "**1** regressed · **1** failed · **1** inconclusive · **1** improved · "
        "**1** within noise · **1** no change · **1** skipped"
    )


def test_only_changed_rows_in_the_table_and_the_rest_in_details() -> None:
    body = render_comment(mixed())
    table, details = body.split("<details>")
    for name in ("ipc.echo\\[size=64\\]", "ipc.batch", "startup"):
        assert f"| {name} |" in table
    for name in ("parse", "render", "gpu.kernel", "io.flush"):
        assert f"| {name} |" in details and f"| {name} |" not in table
    assert "4 other regimes (not changed)" in details
    assert (
        "| ipc.echo\\[size=64\\] | 2.5 µs | 3.13 µs | +25.0% [+24.0%, +26.0%] | ❌ regressed |"
        in table
    )


def test_provenance_and_statistics_note() -> None:
    body = render_comment(mixed())
    assert f"**Base** main · {'a' * 40} · Base commit" in body
    assert f"**Head** feature · {'b' * 40} · Make it faster" in body
    assert f"**Machine** {MACHINE.describe()}" in body
    assert "Benjamini–Hochberg correction" in body and "±1%" in body and "p &lt; 0.05" in body


def test_a_regime_judged_on_its_own_band_is_named_in_the_comment_and_the_notes() -> None:
    from perfctl.render.notes import comparison_notes
    from perfctl.render.tables import format_compare_markdown

    plain = comparison([regime("pipe", NO_CHANGE), regime("work", NO_CHANGE)])
    assert "bands of their own" not in render_comment(plain)
    assert not [n for n in comparison_notes(plain) if "band" in n]
    own = comparison([regime("pipe", NO_CHANGE, threshold=0.1), regime("work", NO_CHANGE)])
    assert "±1% (pipe ±10%: bands of their own)." in render_comment(own)
    line = "Noise bands of their own (declared by the regime, in place of ±1%): pipe ±10%."
    assert line in comparison_notes(own) and line in format_compare_markdown(own)


def test_the_changes_chart_shades_a_regimes_own_band_on_its_row() -> None:
    from perfctl.render.charts import changes_figure

    rows = [regime("pipe", NO_CHANGE, threshold=0.1), regime("work", NO_CHANGE)]
    shapes = changes_figure(rows, 0.02)["layout"]["shapes"]
    assert [(s["yref"], s["x0"], s["x1"]) for s in shapes] == [("paper", -2, 2), ("y", -10, 10)]
    assert shapes[1]["y0"] < 0 < shapes[1]["y1"] < 1  # the first row's category only


def test_the_changes_charts_hover_names_only_a_band_other_than_the_charts() -> None:
    from perfctl.render.charts import changes_figure

    rows = [regime("pipe", NO_CHANGE, threshold=0.1), regime("same", NO_CHANGE, threshold=0.02)]
    (trace,) = changes_figure(rows + [regime("work", NO_CHANGE)], 0.02)["data"]
    own = ["its own noise band" in h for h in trace["hovertext"]]
    assert own == [True, False, False]
    assert "±10%" in trace["hovertext"][0]


def test_a_pinned_comparison_says_where_its_workers_ran() -> None:
    from dataclasses import replace

    line = "Placement: every worker of both refs was pinned to CPU 0-1 (--affinity)."
    assert line not in render_comment(mixed())
    body = render_comment(replace(mixed(), settings={"affinity": [0, 1]}))
    assert f"**Machine** {MACHINE.describe()}\n\n{line}\n" in body


def test_headlines() -> None:
    assert headline(comparison([regime("a", REGRESSED, change=0.1)] * 2)) == "❌ 2 regressions"
    assert (
        headline(comparison([regime("a", IMPROVED, change=-0.1)] * 3))
        == "✅ 3 improvements, no regressions"
    )
    assert headline(comparison([regime("a", WITHIN_NOISE)])) == "➖ No significant change"
    assert (
        headline(comparison([regime("a", INCONCLUSIVE)]))
        == "➖ No significant change (1 inconclusive)"
    )
    assert headline(comparison([regime("a", FAILED)])) == "❌ 1 failed"
    assert headline(comparison([])) == "➖ No regimes compared"


def test_has_changes() -> None:
    assert has_changes(mixed())
    assert not has_changes(comparison([regime("a", WITHIN_NOISE), regime("b", INCONCLUSIVE)]))


def test_different_machines_are_called_out() -> None:
    other = Machine(
        id="m2",
        cpu_model="Other CPU",
        cores=4,
        memory_bytes=2**34,
        kernel="6.2",
        governor="powersave",
        python="3.12.0",
    )
    body = render_comment(comparison([regime("a", NO_CHANGE)], head_machine=other))
    assert "**Machine (base)** Test CPU" in body
    assert "**Machine (head)** Other CPU" in body and "different machines" in body


def test_run_url_link_without_url_base() -> None:
    body = render_comment(mixed(), CommentOptions(run_url="https://github.com/o/r/actions/runs/9"))
    assert "[this run](https://github.com/o/r/actions/runs/9)" in body
    assert "Profiles" not in body  # flamegraph links need a URL base


# -- escaping ---------------------------------------------------------------------
def test_hostile_regime_name_cannot_break_the_table_or_inject_html() -> None:
    c = comparison(
        [
            regime("a|b<script>alert(1)</script>", REGRESSED, change=0.3),
            regime("x\ny`z`*w*_[l](http://e.vil)", IMPROVED, change=-0.2),
        ]
    )
    body = render_comment(c)
    assert "<script>" not in body and "</script>" not in body
    assert "| a\\|b&lt;script&gt;alert(1)&lt;/script&gt; |" in body
    assert "| x y\\`z\\`\\*w\\*\\_\\[l\\](http://e.vil) |" in body
    for line in body.splitlines():
        if line.startswith("| ") and "regressed" in line:
            # Exactly five cells: escaped pipes do not count as separators.
            assert len(re.findall(r"(?<!\\)\|", line)) == 6


def test_compare_markdown_escapes_like_the_comment() -> None:
    # `compare --format markdown` is pasted into PRs too: one escaper for both.
    c = comparison([regime("x\ny`z`*w*_[l](http://e.vil)<b>|@octocat", IMPROVED, change=-0.2)])
    md = format_compare_markdown(c)
    assert "| x y\\`z\\`\\*w\\*\\_\\[l\\](http://e.vil)&lt;b&gt;\\|@\u200boctocat |" in md
    assert "<b>" not in md and "](http" not in md.replace("\\](http", "")


def test_compare_markdown_footer_names_the_correction_and_keeps_reasons_and_warnings() -> None:
    md = format_compare_markdown(mixed())
    assert "Benjamini–Hochberg corrected" in md and "benjamini-hochberg" not in md
    assert "| inconclusive (too noisy (CV 18%)) |" in md
    assert "| failed (ImportError: no module named fast) |" in md
    assert "> Warning: base and head ran on a busy machine" in md
    assert "benjamini-hochberg" not in render_comment(mixed(), CommentOptions())


def test_stderr_notes_are_not_wrapped_when_stderr_is_not_a_terminal(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from perfctl.cli.common import Format
    from perfctl.cli.show import show_comparison

    long = " ".join(["the machine was busy (load average up to 4.2 on 2 CPUs);"] * 3)
    show_comparison(
        comparison([regime("parse", NO_CHANGE, 3e-5, 0.001)], warnings=(long,)), Format.table
    )
    err = capsys.readouterr().err
    assert f"Warning: {long}\n" in err
    assert re.search(r"^Verdicts: .* across 1 regimes; change CI must clear ±\d+%\.$", err, re.M)


def test_hostile_ref_name_and_subject() -> None:
    head = RefInfo(
        ref="feat/<b>x</b>",
        sha="c" * 40,
        subject="fix `code` span``\nnew line | pipe @octocat <img src=x>",
    )
    body = render_comment(comparison([regime("a", NO_CHANGE)], head=head))
    line = next(x for x in body.splitlines() if x.startswith("**Head**"))
    assert line == (
        f"**Head** feat/&lt;b&gt;x&lt;/b&gt; · {'c' * 40} · fix \\`code\\` "
        "span\\`\\` new line \\| pipe @\u200boctocat &lt;img src=x&gt;  "
    )


def test_md_escape_limits_length_and_drops_control_characters() -> None:
    assert md_escape("a\x00b\x1bc\r\nd") == "a b c d"
    long = md_escape("x" * 1000)
    assert len(long) == 200 and long.endswith("…")


def test_a_ref_given_as_its_sha_is_not_repeated() -> None:
    base = RefInfo(ref="a" * 12, sha="a" * 40, subject="s")
    body = render_comment(comparison([regime("a", NO_CHANGE)], base=base))
    assert f"**Base** {'a' * 40} · s  " in body.splitlines()


def test_non_hex_sha_is_escaped() -> None:
    base = RefInfo(ref="main", sha="<not-a-sha>", dirty=True)
    body = render_comment(comparison([regime("a", NO_CHANGE)], base=base))
    assert "**Base** main · &lt;not-a-sha&gt; (dirty)" in body


# -- truncation -------------------------------------------------------------------
def test_thousands_of_regimes_fit_under_githubs_limit() -> None:
    rows = [
        regime(
            f"family{i % 7}.regime_with_a_long_name[size={i}]",
            REGRESSED if i % 2 else IMPROVED,
            change=0.1 if i % 2 else -0.1,
        )
        for i in range(3000)
    ]
    rows += [regime(f"steady{i}", WITHIN_NOISE) for i in range(2000)]
    body = render_comment(comparison(rows), CommentOptions(url_base="https://x.example/r"))
    assert github_length(body) < GITHUB_LIMIT
    omitted = re.search(r"_(\d+) rows omitted; see the report \(\[report\]\(", body)
    assert omitted is not None
    shown = sum(1 for line in body.splitlines() if line.startswith("| family"))
    assert shown > 100 and shown + int(omitted.group(1)) == 5000
    assert "<details>" not in body  # details go first
    assert "❌ 1500 regressions, 1500 improvements" in body  # counts stay whole


def test_details_are_dropped_before_changed_rows() -> None:
    rows = [regime("reg", REGRESSED, change=0.2)]
    rows += [regime(f"steady_{i:05d}_" + "n" * 60, NO_CHANGE) for i in range(2000)]
    body = render_comment(comparison(rows))
    assert github_length(body) < GITHUB_LIMIT
    assert "| reg |" in body and "<details>" not in body
    assert "_2000 rows omitted; see the report._" in body


def test_small_budget_is_respected() -> None:
    # Full body ~1,500 characters; without details ~1,100; one changed row ~960.
    body = render_comment(mixed(), CommentOptions(budget=1000))
    assert github_length(body) <= 1000
    assert "| ipc.echo\\[size=64\\] |" in body and "| startup |" not in body
    assert "_6 rows omitted; see the report._" in body


def test_github_length_counts_utf16_units() -> None:
    assert github_length("a") == 1
    assert github_length("😀") == 2


# -- markers and links ------------------------------------------------------------
def test_marker_ids() -> None:
    assert marker() == "<!-- perfctl:comment -->"
    assert marker("gpu-suite") == "<!-- perfctl:comment:gpu-suite -->"
    with pytest.raises(UsageError, match="invalid --marker-id"):
        marker("bad id -->")


def test_with_marker_adds_it_once() -> None:
    mark = marker()
    assert with_marker("hello", mark) == f"{mark}\nhello"
    assert with_marker(f"{mark}\nhello", mark) == f"{mark}\nhello"


def test_url_base_must_be_plain_http() -> None:
    assert check_url_base("https://e.org/x/") == "https://e.org/x"
    for bad in ("javascript:alert(1)", "https://e.org/a b", "https://e.org/)"):
        with pytest.raises(UsageError, match="--url-base"):
            check_url_base(bad)


def test_artifact_urls_are_relative_and_quoted() -> None:
    root = Path("/proj/reports/ci")
    assert (
        artifact_url("https://e.org", "/proj/reports/ci/profiles/a b.svg", root)
        == "https://e.org/profiles/a%20b.svg"
    )
    assert artifact_url("https://e.org", "/elsewhere/x.svg", root) == "https://e.org/x.svg"
    assert artifact_url("https://e.org", "../../etc/passwd", root) == "https://e.org/passwd"
    assert artifact_url("https://e.org", "profiles/x.svg", None) == "https://e.org/profiles/x.svg"
