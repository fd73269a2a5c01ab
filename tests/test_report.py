"""HTML reports: rendering of synthetic comparisons and runs, goldens, CLI paths.

The builders here (``make_comparison``, ``make_runs``) are shared with
test_report_browser.py and benchmarks/render_scale.py builds its own.
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path

import pytest

from perfctl.caveats import Caveat, WarningKind
from perfctl.errors import StoreError, UsageError
from perfctl.model import (
    FAILED,
    IMPROVED,
    INCONCLUSIVE,
    NO_CHANGE,
    OK,
    REGRESSED,
    SKIPPED,
    WITHIN_NOISE,
    Comparison,
    Machine,
    RefInfo,
    RegimeComparison,
    RegimeResult,
    Run,
    SideStats,
    Status,
    Verdict,
)
from perfctl.render import charts, history
from perfctl.render import html as page
from perfctl.render import html_report as report
from perfctl.render.charts import format_change, format_per_op, pick_unit
from perfctl.render.html_report import read_moved, render_comparison, render_history
from tests.conftest import GitRepo

GOLDEN = Path(__file__).parent / "golden"
XSS = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=2;alert(1)">'
MACHINE = Machine("m-1234", "Test CPU", 2, 8 * 2**30, "6.1.0", "performance", "3.11.7")
OTHER_MACHINE = Machine("m-9999", "Other CPU", 4, 16 * 2**30, "6.1.0", "schedutil", "3.11.7")
SVG = (
    '<svg xmlns="http://www.w3.org/2000/svg" width="300" height="60"><rect width="300" '
    'height="60" fill="#e8a33c"/><text x="8" y="35">{}</text></svg>'
)
VERDICT_CYCLE = (REGRESSED, IMPROVED, NO_CHANGE, WITHIN_NOISE, INCONCLUSIVE, SKIPPED)


# ------------------------------------------------------------------ builders


def _side(median: float, ratio: float | None = None) -> SideStats:
    return SideStats(
        median, median * 0.99, median * 1.01, median * 0.97, median * 1.03, 0.03, 10, ratio
    )


def _values(rng: random.Random, median: float, n: int = 10) -> tuple[tuple[float, ...], ...]:
    return tuple(tuple(rng.gauss(median, median * 0.03) for _ in range(3)) for _ in range(n))


def make_regime(
    rng: random.Random,
    name: str,
    family: str,
    verdict: str,
    base: float,
    head: float,
    *,
    text: str = "",
    artifacts: dict[str, str] | None = None,
) -> RegimeComparison:
    """One measured regime with raw values, interleaved ABBA order and stats."""
    n = 10
    # ABBA: base goes first in even pairs, second in odd ones.
    base_order = tuple(2 * p + (p % 2) for p in range(n))
    head_order = tuple(2 * p + 1 - (p % 2) for p in range(n))
    return RegimeComparison(
        name=name + text,
        family=family,
        verdict=Verdict(verdict),
        reason=f"reason {verdict}{text}",
        description=f"Docstring of {name}.{text}\nSecond line.",
        base=_side(base, 1.5),
        head=_side(head, 1.6),
        change=head / base - 1,
        ci_low=head / base - 1.02,
        ci_high=head / base - 0.98,
        p_value=0.001,
        p_adjusted=0.004,
        base_values=_values(rng, base, n),
        head_values=_values(rng, head, n),
        base_order=base_order,
        head_order=head_order,
        artifacts=artifacts or {},
    )


def write_profile(root: Path, name: str = "ipc", text: str = "") -> dict[str, str]:
    """Flamegraph SVGs and a diff.json laid out and keyed as the profile stage does."""
    d = root / "reports" / "profiles" / name
    d.mkdir(parents=True, exist_ok=True)
    for side in ("base", "head", "diff"):
        (d / f"{side}.svg").write_text(SVG.format(side), encoding="utf-8")
    (d / "summary.json").write_text("{}", encoding="utf-8")
    steps = [
        {
            "label": "frames2topicmsgs" + text,
            "path": ["run", "send"],
            "before_per_op_s": 10e-6,
            "after_per_op_s": 4e-6,
        },
        {
            "label": "recv_multipart",
            "path": ["run", "recv"],
            "before_per_op_s": 5e-6,
            "after_per_op_s": 3.5e-6,
        },
        {"label": "put", "path": ["run", "shm"], "before_per_op_s": 0.0, "after_per_op_s": 1.2e-6},
    ]
    diff = {
        "schema": 1,
        "kind": "perfctl-profile-diff",
        "moved": {"before_per_op_s": 20e-6, "after_per_op_s": 14e-6, "steps": steps},
    }
    (d / "diff.json").write_text(json.dumps(diff), encoding="utf-8")
    rel = d.relative_to(root)
    return {
        "base_flamegraph": f"{rel}/base.svg",
        "head_flamegraph": f"{rel}/head.svg",
        "diff_flamegraph": f"{rel}/diff.svg",
        "profile_diff": f"{rel}/diff.json",
        "head_profile_summary": f"{rel}/summary.json",
    }


def make_comparison(
    *,
    families: int = 2,
    per_family: int = 3,
    text: str = "",
    artifacts: dict[str, str] | None = None,
    seed: int = 7,
) -> Comparison:
    """A comparison of two refs over several families, every verdict represented."""
    rng = random.Random(seed)
    regimes = []
    for f in range(families):
        for i in range(per_family):
            k = f * per_family + i
            verdict = VERDICT_CYCLE[k % len(VERDICT_CYCLE)]
            base = 10 ** rng.uniform(-7, -3)
            head = base * {REGRESSED: 1.2, IMPROVED: 0.7}.get(verdict, 1.005)
            art = artifacts if k == 0 else None
            regimes.append(
                make_regime(
                    rng,
                    f"fam{f}[n={i}]",
                    f"fam{f}" + (text if f else ""),
                    verdict,
                    base,
                    head,
                    text=text if k == 0 else "",
                    artifacts=art,
                )
            )
    regimes.append(
        RegimeComparison(
            "broken" + text, "fam0", FAILED, reason="ZeroDivisionError", head_status=Status.FAILED
        )
    )
    return Comparison(
        id="20260101T000000-abcdef",
        created="2026-01-01T00:00:00+00:00",
        base=RefInfo("main" + text, "a" * 40, "Base subject" + text, "2026-01-01T10:00:00+01:00"),
        head=RefInfo("feature" + text, "b" * 40, "Head subject", "2026-01-02T10:00:00+00:00"),
        machine=MACHINE,
        regimes=tuple(regimes),
        settings={"rounds": 10, "note": "n" + text},
        commits=(RefInfo("", "c" * 40, "Middle commit" + text, "2026-01-01T12:00:00+00:00"),),
        warnings=(Caveat("a warning" + text, WarningKind.BUSY_MACHINE),),
    )


def make_runs(
    n_runs: int = 24, regimes: int = 3, *, text: str = "", step_at: int = 12, seed: int = 3
) -> list[Run]:
    """Stored runs of one machine (newest first), with a 25% step at ``step_at``."""
    rng = random.Random(seed)
    bases = [10 ** rng.uniform(-7, -3) for _ in range(regimes)]
    runs = []
    for i in range(n_runs):
        level = 1.25 if i >= step_at else 1.0
        results = tuple(
            RegimeResult(
                f"reg{j}" + (text if j == 0 else ""),
                f"fam{j % 2}",
                OK,
                processes=_values(rng, b * level),
            )
            for j, b in enumerate(bases)
        )
        day = f"2026-{1 + i // 28:02d}-{1 + i % 28:02d}"
        ref = RefInfo("main", f"{i:040x}", f"Commit {i}" + text, f"{day}T10:00:00+00:00")
        runs.append(
            Run(
                f"run{i:03d}",
                "proj",
                ref,
                MACHINE,
                f"{day}T12:00:00+00:00",
                status="complete",
                results=results,
            )
        )
    return runs[::-1]


# ------------------------------------------------------------ HTML helpers


class _Structure(HTMLParser):
    """Elements with ids and the section headings, in document order."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []
        self._heading: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if a.get("id"):
            chart = " [chart]" if "chart" in (a.get("class") or "").split() else ""
            self.lines.append(f"{tag}#{a['id']}{chart}")
        if tag in ("h1", "h2", "h3"):
            self._heading = tag

    def handle_data(self, data: str) -> None:
        if self._heading and data.strip():
            self.lines.append(f"  {self._heading}: {data.strip()}")
            self._heading = None


def structure(html: str) -> str:
    """The golden form of a report: ids, charts and headings, not bytes."""
    parser = _Structure()
    parser.feed(re.sub(r"<script\b.*?</script>", "", html, flags=re.S))
    scripts = len(re.findall(r"<script\b", html))
    return "\n".join([f"scripts: {scripts}", *parser.lines]) + "\n"


def check_golden(name: str, html: str) -> None:
    """Compare with tests/golden/<name>; PERFCTL_UPDATE_GOLDEN=1 rewrites it."""
    path = GOLDEN / name
    got = structure(html)
    if os.environ.get("PERFCTL_UPDATE_GOLDEN"):
        path.parent.mkdir(exist_ok=True)
        path.write_text(got, encoding="utf-8")
    assert got == path.read_text(encoding="utf-8")


def figures(html: str) -> dict[str, dict]:
    """The figure JSON the page hands to Plotly."""
    m = re.search(
        r'<script type="application/json" id="perfctl-figures">(.*?)</script>', html, re.S
    )
    assert m
    payload = json.loads(m.group(1))
    assert set(payload) == {"template", "figures"}
    return payload["figures"]


def check_figures(html: str) -> None:
    """Every figure is valid plotly (validation is skipped at render time for speed)."""
    import plotly.graph_objects as go

    for fig in figures(html).values():
        go.Figure(fig)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project directory with a pyproject.toml."""
    root = tmp_path / "proj"
    root.mkdir()
    (root / "pyproject.toml").write_text('[project]\nname = "p"\n', encoding="utf-8")
    return root


def _render(c: Comparison, root: Path, **kw: object) -> str:
    out = render_comparison(c, project_root=root, out=root / "reports" / "c.html", **kw)  # type: ignore[arg-type]
    return out.read_text(encoding="utf-8")


# ------------------------------------------------------------------ units


def test_log_axis_ticks_are_labelled_with_their_own_units() -> None:
    rng = random.Random(5)
    spread = [
        make_regime(rng, f"s{i}", "s", IMPROVED, t, t * 0.8) for i, t in enumerate((5e-8, 4e-2))
    ]
    y = charts.bars_figure("s", spread, "base", "head")["layout"]["yaxis"]
    assert y["type"] == "log" and y["title"]["text"] == "time per op (log scale)"
    scale = 1e-3  # the figure's unit: ms, from the largest CI bound
    shown = {round(v, 9): t for v, t in zip(y["tickvals"], y["ticktext"], strict=True)}
    assert shown[0.1] == "100 µs" and shown[1.0] == "1 ms" and shown[1e-4] == "100 ns"
    assert all(text.endswith(("ns", "µs", "ms", " s")) for text in y["ticktext"])
    assert min(y["tickvals"]) * scale <= 5e-8 and max(y["tickvals"]) * scale >= 4e-2


def test_profile_stacked_bars_have_a_legend() -> None:
    nodes = [charts.MovedNode("a", 1e-6, 2e-6), charts.MovedNode("b", 3e-6, 1e-6)]
    fig = charts.profile_waterfall_figure("r", nodes, "base", "head")
    bars = [t for t in fig["data"] if t["type"] == "bar"]
    assert fig["layout"]["showlegend"] is True
    assert [(t["name"], t["showlegend"]) for t in bars] == [("b", True), ("a", True)]


def test_regime_names_break_only_after_separators() -> None:
    assert str(page.wbr("a_b[n=1].c<x>")) == "a_<wbr>b[<wbr>n=<wbr>1].<wbr>c&lt;x&gt;"


def test_units_are_human() -> None:
    assert pick_unit(2.5e-6) == ("µs", 1e-6)
    assert pick_unit(0.0) == ("ns", 1e-9)
    assert format_per_op(1.234e-6) == "1.23 µs/op"
    assert format_per_op(0.25) == "250 ms/op"
    assert format_per_op(None) == "—"
    assert format_per_op(float("nan")) == "—"
    assert format_change(0.042) == "+4.2%"
    assert format_change(None) == "—"


def test_label_escapes_plotly_html() -> None:
    assert charts.label("<b>x</b> & y") == "&lt;b&gt;x&lt;/b&gt; &amp; y"


# -------------------------------------------------------------- comparison


def test_comparison_structure_matches_golden(project: Path) -> None:
    html = _render(make_comparison(), project)
    check_golden("report_comparison.txt", html)
    check_figures(html)
    assert set(figures(html)) == {
        "chart-bars-fam0",
        "chart-bars-fam1",
        "chart-dist-fam0",
        "chart-dist-fam1",
        "chart-changes",
    }


def test_comparison_with_profile_matches_golden(project: Path) -> None:
    html = _render(make_comparison(artifacts=write_profile(project)), project)
    check_golden("report_comparison_profile.txt", html)
    check_figures(html)
    fig = figures(html)["chart-waterfall-fam0-n-0"]
    kinds = [t["type"] for t in fig["data"]]
    assert kinds == ["bar", "bar", "bar", "bar", "waterfall"]  # 3 steps + the uncovered rest
    fall = fig["data"][-1]
    assert fall["measure"] == ["absolute", *["relative"] * 4, "total"]
    assert fall["x"][1] == "frames2topicmsgs" and "(elsewhere)" in fall["x"]
    assert fall["y"][0] == pytest.approx(20.0)  # µs: starts at the measured base total
    assert fall["y"][0] + sum(fall["y"][1:-1]) == pytest.approx(14.0)  # ends at head's


def test_plotly_embedded_once_inline(project: Path) -> None:
    html = _render(make_comparison(), project)
    assert html.count("<script") == 3  # plotly, the figure data, the page's own JS
    assert html.count("plotly.js v") == 1
    assert "<script src=" not in html


def test_plotly_from_cdn(project: Path) -> None:
    html = _render(make_comparison(), project, plotly_js="cdn")
    assert re.search(r'<script src="https://cdn\.plot\.ly/plotly-[\d.]+\.min\.js"', html)
    assert "plotly.js v" not in html
    assert len(html) < 500_000


def test_regressions_come_first(project: Path) -> None:
    html = _render(make_comparison(), project)
    verdicts = re.findall(r'<tr id="row-[^"]+" class="verdict-([a-z-]+)"', html)
    assert verdicts[:2] == ["regressed", "failed"]
    assert verdicts[-1] == "skipped"
    assert len(verdicts) == 7


def test_header_shows_refs_machine_counts(project: Path) -> None:
    html = _render(make_comparison(), project)
    assert "aaaaaaaaaa" in html and "Base subject" in html and "2026-01-02T10:00:00" in html
    assert MACHINE.describe() in html
    assert "Middle commit" in html
    assert '<span class="n">1</span> regressed' in html
    assert '<span class="n">1</span> failed' in html
    assert "<code>10</code>" in html  # settings: rounds


def test_payloads_render_as_text(project: Path) -> None:
    c = make_comparison(text=XSS, artifacts=write_profile(project, text=XSS))
    html = _render(c, project)
    assert XSS not in html
    assert html.count("</script>") == 3
    assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in html
    # In the figure JSON the payload is doubly inert: \u003c-escaped, and
    # HTML-escaped for plotly's label renderer.
    raw = re.search(r'id="perfctl-figures">(.*?)</script>', html, re.S).group(1)  # type: ignore[union-attr]
    assert "<" not in raw
    assert "&lt;script&gt;" in json.dumps(json.loads(raw))


def test_history_payloads_render_as_text(tmp_path: Path) -> None:
    out = render_history(make_runs(6, 2, text=XSS), out=tmp_path / "h.html")
    html = out.read_text(encoding="utf-8")
    assert XSS not in html
    assert html.count("</script>") == 3


def test_flamegraphs_embedded_linked_or_missing(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    art = write_profile(project)
    art["head_flamegraph"] = "reports/profiles/ipc/gone.svg"
    html = _render(make_comparison(artifacts=art), project)
    assert html.count('data="data:image/svg+xml;base64,') == 2
    assert 'href="profiles/ipc/base.svg"' in html  # relative to the HTML file
    assert "head flamegraph: missing" in html
    assert (
        '<a href="profiles/ipc/summary.json" target="_blank" rel="noopener">head profile '
        "summary</a>" in html
    )
    labels = re.findall(r"<summary>fam0\[n=0\]: ([a-z ]+) <a href", html)
    assert labels == ["base flamegraph", "diff flamegraph"]
    monkeypatch.setattr(report, "EMBED_LIMIT_BYTES", 10)
    html = _render(make_comparison(artifacts=art), project)
    assert 'data="data:image/svg+xml' not in html
    assert 'data="profiles/ipc/diff.svg"' in html
    assert "(linked, not embedded)" in html


def test_absolute_artefact_paths(project: Path, tmp_path: Path) -> None:
    art = {k: str(project / v) for k, v in write_profile(project).items()}
    html = _render(make_comparison(artifacts=art), project)
    assert 'href="profiles/ipc/diff.json"' in html
    assert "chart-waterfall-fam0-n-0" in figures(html)


def test_no_profile_falls_back_to_regime_deltas(project: Path) -> None:
    art = write_profile(project)
    (project / art["profile_diff"]).write_text("{not json", encoding="utf-8")
    html = _render(make_comparison(artifacts=art), project)
    assert "chart-changes" in figures(html)
    assert "No differential profile was stored" in html


def test_without_a_profile_each_regime_shows_its_stored_change_and_ci(project: Path) -> None:
    # #12.7: no waterfall summing the medians of unrelated regimes; the stored
    # change and CI of every tested regime on one % axis instead.
    c = make_comparison()
    html = _render(c, project)
    fig = figures(html)["chart-changes"]
    assert {t["type"] for t in fig["data"]} == {"scatter"}
    shown = {
        y: (x, x + plus, x - minus, t["name"])
        for t in fig["data"]
        for x, y, plus, minus in zip(
            t["x"], t["y"], t["error_x"]["array"], t["error_x"]["arrayminus"], strict=True
        )
    }
    tested = [r for r in c.sorted_regimes() if r.change is not None]
    assert set(shown) == {r.name for r in tested} and len(shown) == len(tested)
    for r in tested:
        x, high, low, verdict = shown[r.name]
        assert r.change is not None and r.ci_high is not None and r.ci_low is not None
        assert (x, high, low) == pytest.approx((r.change * 100, r.ci_high * 100, r.ci_low * 100))
        assert verdict == r.verdict
    band = fig["layout"]["shapes"][0]
    assert (band["x0"], band["x1"]) == pytest.approx((-1.0, 1.0))
    assert fig["layout"]["xaxis"]["ticksuffix"] == "%"
    assert fig["layout"]["yaxis"]["categoryarray"] == [r.name for r in tested]
    assert "±1% noise threshold" in html


def test_the_change_is_said_to_be_hodges_lehmann_and_the_medians_ratio_labelled(
    project: Path,
) -> None:
    # #12.6: 113 -> 155 ns medians with a +7.7% stored change.
    c = make_comparison()
    first = replace(c.regimes[0], base=_side(113e-9), head=_side(155e-9), change=0.077,
                    ci_low=0.01, ci_high=0.2)  # fmt: skip
    html = _render(replace(c, regimes=(first, *c.regimes[1:])), project)
    assert "head/base − 1 of the medians" not in html
    assert "Hodges–Lehmann shift the verdict was decided on" in html
    row = re.search(r'<tr id="row-fam0-n-0".*?</tr>', html, re.S)
    assert row
    assert '>+7.7% <span class="ci">[+1.0%, +20.0%]</span>' in row[0]
    medians = '<span class="medians" title="head median / base median − 1: not the change">'
    assert medians + "medians +37.2%</span>" in row[0]


@pytest.mark.parametrize(
    ("payload", "count"),
    [
        ([{"node": "a", "before_per_op_s": 1e-6, "after_per_op_s": 2e-6}], 1),
        ({"where_the_time_moved": [{"node": "a", "before_per_op_s": 1, "after_per_op_s": 2}]}, 1),
        (
            {
                "moved": {
                    "before_per_op_s": 3,
                    "after_per_op_s": 3,
                    "steps": [{"label": "a", "before_per_op_s": 1, "after_per_op_s": 2}],
                }
            },
            2,
        ),
        (
            {
                "moved": {
                    "before_per_op_s": "?",
                    "steps": [{"label": "a", "before_per_op_s": 1, "after_per_op_s": 2}],
                }
            },
            1,
        ),
        (
            {
                "moved": [
                    {"node": "a"},
                    {"node": "b", "before_per_op_s": "x", "after_per_op_s": 1},
                    {"before_per_op_s": 1, "after_per_op_s": 2},
                    "junk",
                    {"node": "c", "before_per_op_s": 1, "after_per_op_s": 2},
                ]
            },
            1,
        ),
        ({"moved": "nope"}, 0),
        ([{"node": "a", "before_per_op_s": float("nan"), "after_per_op_s": 1}], 0),
        (42, 0),
    ],
)
def test_read_moved_is_defensive(tmp_path: Path, payload: object, count: int) -> None:
    path = tmp_path / "diff.json"
    path.write_text(json.dumps(payload), encoding="utf-8")
    assert len(read_moved(path)) == count
    assert read_moved(tmp_path / "absent.json") == []


def test_top_nodes_sums_the_rest_and_keeps_labels_unique() -> None:
    nodes = [charts.MovedNode("f", 1.0, 1.0 + i) for i in range(15)]
    top = charts.top_nodes(nodes, limit=3)
    assert [n.node for n in top] == ["f", "f (2)", "f (3)", "12 other nodes"]
    assert sum(n.after_s for n in top) == sum(n.after_s for n in nodes)


def test_empty_comparison_renders(project: Path) -> None:
    c = make_comparison()
    empty = Comparison(c.id, c.created, c.base, c.head, c.machine, ())
    html = _render(empty, project)
    assert figures(html) == {}
    assert "No regime has measurements" in html


def test_head_on_other_machine_is_flagged(project: Path) -> None:
    c = make_comparison()
    c2 = Comparison(
        c.id, c.created, c.base, c.head, c.machine, c.regimes, head_machine=OTHER_MACHINE
    )
    assert "Head ran on another machine: Other CPU" in _render(c2, project)


# ---------------------------------------------------------------- history


def test_history_structure_matches_golden(tmp_path: Path) -> None:
    html = render_history(make_runs(), out=tmp_path / "history.html").read_text("utf-8")
    check_golden("report_history.txt", html)
    check_figures(html)


def test_history_keeps_counter_runs_off_the_time_axis(tmp_path: Path) -> None:
    """An instructions run of the same regimes would read as a 10^9x slowdown."""
    runs = make_runs(8, 1, step_at=99)
    counted = [
        replace(r, id=f"i{r.id}",
                results=tuple(replace(x, unit="instructions/op", processes=((1e6,),) * 3)
                              for x in r.results))
        for r in runs[:3]
    ]  # fmt: skip
    html = render_history([*counted, *runs], out=tmp_path / "h.html").read_text("utf-8")
    (fig,) = figures(html).values()
    median = next(t for t in fig["data"] if t.get("name") == "median")
    assert len(median["x"]) == 8 and max(median["y"]) < 1e5  # the 8 timed runs only
    assert not any(t.get("name") == "change detected" and t["x"] for t in fig["data"])


def test_history_marks_the_step(tmp_path: Path) -> None:
    html = render_history(make_runs(), out=tmp_path / "h.html").read_text("utf-8")
    for fig in figures(html).values():
        marker = next(t for t in fig["data"] if t.get("name") == "change detected")
        assert len(marker["x"]) >= 1
        assert "2026-01-13 10:00:00" in marker["x"]  # run 12, the first slower one
        assert "Commit 12" in " ".join(marker["hovertext"])
        median = next(t for t in fig["data"] if t.get("name") == "median")
        assert median["x"] == sorted(median["x"])  # by commit date


def test_history_flags_come_from_change_points_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    # No second rule of its own (CIs apart and medians 2% apart) behind the
    # stats one: a change point is what stats.change_points says, or nothing.
    import perfctl.stats.history

    seen: list[list[float]] = []

    def found(medians: list[float]) -> list[int]:
        seen.append(medians)
        return [1]

    monkeypatch.setattr(perfctl.stats.history, "change_points", found)
    assert history.change_flags([1.0, 1.3, 1.3, 1.3]) == [False, True, False, False]
    assert seen == [[1.0, 1.3, 1.3, 1.3]]
    monkeypatch.undo()
    # A zero median: stats cannot tell levels apart, so nothing is marked.
    assert history.change_flags([1.0, 0.0, 1.3, 1.3, 1.3, 1.3]) == [False] * 6


def test_a_runs_history_point_is_its_process_medians_interval() -> None:
    from perfctl.stats.summary import Interval, median_interval

    s = median_interval(tuple((float(i),) for i in range(1, 21)))
    assert s is not None and s.low < s.median < s.high and s.median == 10.5
    assert s.method == "95% CI"
    assert median_interval(()) is None and median_interval(((),)) is None
    assert median_interval(((1.0,), (3.0,))) == Interval(2.0, 1.0, 3.0, "range")
    # The process is the unit: two values in one process are one mean.
    assert median_interval(((1.0, 3.0), (2.0,))) == Interval(2.0, 2.0, 2.0, "range")
    # A failed result is no point of the history, whatever values it kept.
    runs = make_runs(4, 1)
    failed = replace(runs[1].results[0], status=Status.FAILED)
    runs[1] = replace(runs[1], results=(failed,))
    (series,) = history.trend_series(runs, dates=True)
    assert len(series.points) == 3
    assert all(f"run {runs[1].id}" not in p.hover for p in series.points)
    # Nor is one timed on compare's --clock cpu|busy: off the wall-time axis.
    on_cpu = replace(runs[2].results[0], clock="busy")
    runs[2] = replace(runs[2], results=(on_cpu,))
    (series,) = history.trend_series(runs, dates=True)
    assert len(series.points) == 2


def test_commit_time_normalises_offsets() -> None:
    run = make_runs(1)[0]
    shifted = Run(
        run.id, run.project, RefInfo("x", "1" * 40, "", "2026-01-01T10:00:00+02:00"), MACHINE, ""
    )
    assert history.commit_time(shifted) == "2026-01-01 08:00:00"
    undated = Run(run.id, run.project, RefInfo("x", "1" * 40), MACHINE, "not a date")
    assert history.commit_time(undated) is None


def test_history_picks_the_common_machine(tmp_path: Path) -> None:
    runs = make_runs(6)
    odd = runs[0]
    other = Run("odd", "proj", odd.ref, OTHER_MACHINE, odd.started, results=odd.results)
    html = render_history([other, *runs], out=tmp_path / "h.html").read_text("utf-8")
    assert "<code>m-1234</code> Test CPU" in html and "(shown)" in html
    html = render_history([other, *runs], out=tmp_path / "h.html", machine_id="m-99").read_text(
        "utf-8"
    )
    assert "1 run<" in html
    with pytest.raises(StoreError, match="matches 0 stored fingerprints"):
        render_history(runs, out=tmp_path / "h.html", machine_id="zzz")


def test_history_without_dates_uses_commit_axis(tmp_path: Path) -> None:
    runs = [
        Run(
            r.id,
            r.project,
            RefInfo("main", r.ref.sha, r.ref.subject),
            MACHINE,
            "",
            results=r.results,
        )
        for r in make_runs(4)
    ]
    html = render_history(runs, out=tmp_path / "h.html").read_text("utf-8")
    fig = next(iter(figures(html).values()))
    assert fig["layout"]["xaxis"]["type"] == "category"


def test_empty_history_renders(tmp_path: Path) -> None:
    html = render_history([], out=tmp_path / "h.html").read_text("utf-8")
    assert "No stored run has results" in html


# ------------------------------------------------------ templates, writing


def test_template_dir_overrides_file_by_file(project: Path, tmp_path: Path) -> None:
    mine = tmp_path / "tpl"
    mine.mkdir()
    (mine / "report.css").write_text("body { color: rebeccapurple; }", encoding="utf-8")
    html = _render(make_comparison(), project, template_dir=mine)
    assert "rebeccapurple" in html and 'id="results-table"' in html


def test_template_errors_are_usage_errors(project: Path, tmp_path: Path) -> None:
    mine = tmp_path / "tpl"
    mine.mkdir()
    (mine / "comparison.html.j2").write_text("{{ no_such_field }}", encoding="utf-8")
    with pytest.raises(UsageError, match="no_such_field") as info:
        _render(make_comparison(), project, template_dir=mine)
    assert "--template-dir" in info.value.hint
    with pytest.raises(UsageError, match="is not a directory"):
        _render(make_comparison(), project, template_dir=tmp_path / "nope")


def test_user_template_autoescapes(project: Path, tmp_path: Path) -> None:
    mine = tmp_path / "tpl"
    mine.mkdir()
    (mine / "comparison.html.j2").write_text(
        "<p>{{ comparison.base.subject }}</p>", encoding="utf-8"
    )
    html = _render(make_comparison(text=XSS), project, template_dir=mine)
    assert XSS not in html and "&lt;script&gt;" in html


def test_write_is_atomic(project: Path) -> None:
    out = project / "reports" / "c.html"
    out.parent.mkdir()
    out.write_text("old", encoding="utf-8")
    render_comparison(make_comparison(), project_root=project, out=out)
    assert out.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert [p.name for p in out.parent.iterdir()] == ["c.html"]
    assert out.stat().st_mode & 0o777 == 0o644


def test_unknown_plotly_mode(project: Path) -> None:
    with pytest.raises(UsageError, match="plotly_js"):
        _render(make_comparison(), project, plotly_js="svg")


def test_import_stays_light() -> None:
    code = (
        "import sys, perfctl.render.html_report, perfctl.render.charts, perfctl.cli.report; "
        "print(sorted(m for m in ('plotly', 'jinja2', 'pandas') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# -------------------------------------------------------------------- CLI


def _store_comparison(project: Path) -> Comparison:
    from perfctl.store.local import open_store

    c = make_comparison()
    store = open_store(project / ".perfctl")
    store.save_comparison(c)
    for run in make_runs(4):
        store.begin_run(run)
    return c


def test_cli_writes_last_comparison_by_default(project: Path, cli) -> None:
    c = _store_comparison(project)
    done = cli("report", cwd=project)
    assert done.returncode == 0, done.stderr
    path = Path(done.stdout.strip())
    assert path == project / "reports" / f"comparison-{c.id}.html"
    assert path.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")


def test_cli_report_leaves_the_worktree_clean(git_repo: GitRepo, cli) -> None:
    # An untracked reports/ made WORKTREE dirty after every `perfctl report`.
    git_repo.write("pyproject.toml", '[project]\nname = "p"\n')
    git_repo.write(".gitignore", ".perfctl/\n")
    git_repo.commit("c1")
    _store_comparison(git_repo.path)
    done = cli("report", "--last", cwd=git_repo.path)
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()).parent == git_repo.path / "reports"
    assert (git_repo.path / "reports" / ".gitignore").read_text(encoding="utf-8").endswith("*\n")
    assert git_repo.git("status", "--porcelain", "--untracked-files=all") == ""
    done = cli("report", "--history", "-o", "out/h.html", cwd=git_repo.path)
    assert done.returncode == 0, done.stderr
    assert not (git_repo.path / "out" / ".gitignore").exists()  # a path the user chose
    assert git_repo.git("status", "--porcelain") == "?? out/"


def test_a_reports_folder_the_user_made_is_not_given_a_gitignore(project: Path, cli) -> None:
    (project / "reports").mkdir()
    _store_comparison(project)
    done = cli("report", "--last", cwd=project)
    assert done.returncode == 0, done.stderr
    assert not (project / "reports" / ".gitignore").exists()


def test_cli_report_shows_the_stored_statistics(project: Path, cli) -> None:
    # A comparison built by the stats stage from skewed process means, whose
    # Hodges-Lehmann change differs from the medians' ratio; `perfctl report`
    # must show the stored change, CI and CV, and label the medians' ratio.
    from perfctl.stats.verdicts import decide_all
    from perfctl.store.local import open_store

    base = tuple((v,) for v in (100e-9, 101e-9, 102e-9, 103e-9, 104e-9, 122e-9, 123e-9, 124e-9))
    head = tuple((v,) for v in (105e-9, 106e-9, 107e-9, 108e-9, 155e-9, 156e-9, 157e-9, 158e-9))
    results = {
        "skewed": {
            "base": RegimeResult("skewed", "fam", OK, processes=base),
            "head": RegimeResult("skewed", "fam", OK, processes=head),
        }
    }
    (r,) = decide_all(results, threshold=0.02, alpha=0.05)
    assert r.base and r.head and r.change is not None
    medians = r.head.median_s / r.base.median_s - 1
    assert abs(medians - r.change) > 0.05  # the two figures really differ
    c = replace(make_comparison(), regimes=(r,))
    open_store(project / ".perfctl").save_comparison(c)
    done = cli("report", "--last", "-o", "r.html", cwd=project)
    assert done.returncode == 0, done.stderr
    html = (project / "r.html").read_text(encoding="utf-8")
    row = re.search(r'<tr id="row-skewed".*?</tr>', html, re.S)
    assert row
    assert f'{format_change(r.change)} <span class="ci">' in row[0]
    assert f"[{format_change(r.ci_low)}, {format_change(r.ci_high)}]" in row[0]
    assert f"medians {format_change(medians)}</span>" in row[0]
    assert f"{r.base.cv * 100:.1f}%/{r.head.cv * 100:.1f}%" in row[0]
    (trace,) = figures(html)["chart-changes"]["data"]
    assert trace["x"] == [pytest.approx(r.change * 100)]
    assert trace["name"] == r.verdict


def test_cli_prefix_output_cdn_and_history(project: Path, cli) -> None:
    _store_comparison(project)
    done = cli("report", "20260101", "-o", "out/x.html", "--cdn", cwd=project)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "out/x.html"
    assert (project / "out/x.html").stat().st_size < 500_000
    done = cli("report", "--history", "-C", str(project), cwd=project.parent)
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()) == project / "reports" / "history.html"
    # --machine charts another fingerprint than the most common one.
    from dataclasses import replace

    from perfctl.store.local import open_store

    odd = make_runs(1, seed=9)[0]
    open_store(project / ".perfctl").begin_run(replace(odd, id="odd", machine=OTHER_MACHINE))
    done = cli("report", "--history", "--machine", "m-99", "-o", "h.html", cwd=project)
    assert done.returncode == 0, done.stderr
    html = (project / "h.html").read_text(encoding="utf-8")
    assert "<code>m-9999</code> Other CPU" in html and "1 run<" in html
    bad = cli("report", "--history", "--machine", "zzz", cwd=project)
    assert bad.returncode == 2 and bad.stderr.startswith("Error: machine `zzz` matches 0")
    alone = cli("report", "--machine", "m-99", cwd=project)
    assert alone.returncode == 2 and "--machine goes with --history" in alone.stderr


def test_cli_errors(project: Path, cli) -> None:
    done = cli("report", "--last", "--history", cwd=project)
    assert done.returncode == 2
    assert done.stderr == (
        "Error: --last and --history cannot be used together\n"
        "Hint: give one comparison id, --last, --history or --bisect ID\n"
    )
    done = cli("report", "--history", cwd=project)
    assert done.returncode == 2
    assert done.stderr.startswith("Error: no stored runs to chart\n")
    _store_comparison(project)
    done = cli("report", "nosuchid", cwd=project)
    assert done.returncode == 2
    assert done.stderr.startswith("Error: unknown comparison id `nosuchid`\n")


def test_regime_metrics_show_in_html_markdown_and_terminal(project: Path) -> None:
    from dataclasses import replace

    from rich.console import Console

    from perfctl.render.tables import format_compare_markdown, format_metrics_table

    c = make_comparison()
    hostile = "p99_us<img src=x onerror=alert(1)>"
    first = replace(
        c.regimes[0],
        metrics_base={"p99_us": 120.0, "rss_per_worker_bytes": 3.1e7, hostile: 1.0},
        metrics_head={"p99_us": 90.0, "rss_per_worker_bytes": 3.1e7},
    )
    c = replace(c, regimes=(first, *c.regimes[1:]))
    html = _render(c, project)
    assert "3 metrics</summary>" in html
    assert '<td>p99_us</td><td class="num">120</td><td class="num">90</td>' in html
    assert "<img src=x" not in html and "p99_us&lt;img src=x" in html
    md = format_compare_markdown(c)
    assert "| fam0\\[n=0\\] | p99\\_us | 120 | 90 | -25.0% |" in md
    assert "| rss\\_per\\_worker\\_bytes | 3.1e+07 | 3.1e+07 | +0.0% |" in md
    console = Console(width=200, record=True)
    console.print(format_metrics_table(c))
    text = console.export_text()
    assert "Metrics reported by the regimes" in text and "-25.0%" in text and "—" in text
    assert format_metrics_table(make_comparison()) is None
