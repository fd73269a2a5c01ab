"""The pull-request comment: markdown for one Comparison, escaped and size-capped.

Layout (FIELD-NOTES, "PR comments"): a hidden marker that finds the comment
again, the verdict on one line, counts per verdict, a table of only the
changed rows, every other row folded into ``<details>``, provenance (SHAs,
machine), the statistics behind the verdicts and, given a URL base, links to
the HTML report and flamegraphs.

Everything a user or a commit controls (regime names, ref names, commit
subjects, failure reasons, warnings) goes through :func:`md_escape`, so it
can neither break a table nor inject HTML, links or mentions.

GitHub rejects comment bodies over 65,536 characters. :func:`render_comment`
first drops the ``<details>`` rows, then changed rows beyond the most that
fit, and says how many rows it left out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from urllib.parse import quote

from perfctl import __version__
from perfctl.errors import UsageError
from perfctl.model import (
    CHANGED_VERDICTS,
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
)
from perfctl.render.escape import escape_plain, md_escape
from perfctl.render.notes import own_bands, placement_notes
from perfctl.render.tables import change_cell, correction_name, side_cell

GITHUB_LIMIT = 65_536
# Headroom under GitHub's limit: their count and ours may differ on edge cases.
DEFAULT_BUDGET = 65_000
MARKER_PREFIX = "perfctl:comment"

VERDICT_ICON = {
    REGRESSED: "❌",
    IMPROVED: "✅",
    FAILED: "💥",
    INCONCLUSIVE: "⚠️",
    WITHIN_NOISE: "➖",
    NO_CHANGE: "➖",
    SKIPPED: "⏭️",
}
TABLE_HEAD = "| Regime | Base | Head | Δ [CI] | Verdict |\n| :--- | ---: | ---: | ---: | :--- |"

_MARKER_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
_URL_BASE = re.compile(r"^https?://[^\s<>()\"'`\\]+$")
_HEX_SHA = re.compile(r"^[0-9a-f]{4,64}$")


@dataclass(frozen=True)
class CommentOptions:
    """How to render: the marker suffix, link targets and the size budget."""

    marker_id: str = ""
    url_base: str | None = None  # where report.html and artefacts are published
    artifact_root: Path | None = None  # artefact paths are made relative to it
    report_name: str = "report.html"
    run_url: str | None = None  # e.g. the Actions run holding the artefacts
    budget: int = DEFAULT_BUDGET


def marker(marker_id: str = "") -> str:
    """The hidden first line that identifies perfctl's comment (one per suite)."""
    if marker_id and not _MARKER_ID.match(marker_id):
        raise UsageError(
            f"invalid --marker-id `{escape_plain(marker_id)}`",
            "use 1-64 letters, digits, '.', '_' or '-'",
        )
    suffix = f":{marker_id}" if marker_id else ""
    return f"<!-- {MARKER_PREFIX}{suffix} -->"


def with_marker(body: str, mark: str) -> str:
    """``body`` with ``mark`` as its first line (added when it is missing)."""
    first = body.split("\n", 1)[0].strip()
    return body if first == mark else f"{mark}\n{body}"


def check_url_base(url: str | None) -> str | None:
    """The URL base without a trailing slash, or UsageError when it is unsafe."""
    if url is None:
        return None
    if not _URL_BASE.match(url):
        raise UsageError(
            f"--url-base `{escape_plain(url)}` is not a plain http(s) URL",
            "pass e.g. https://example.org/perf/run-42 (no spaces, quotes or brackets)",
        )
    return url.rstrip("/")


def github_length(text: str) -> int:
    """Length as GitHub counts it (UTF-16 code units, the stricter reading)."""
    return len(text.encode("utf-16-le")) // 2


def has_changes(c: Comparison) -> bool:
    """True when some regime regressed, improved or failed."""
    return any(r.verdict in CHANGED_VERDICTS for r in c.regimes)


# -- escaping ----------------------------------------------------------------
def sha_text(ref: RefInfo) -> str:
    """The full SHA as plain text (GitHub links it), '(dirty)' when edited."""
    sha = ref.sha if _HEX_SHA.match(ref.sha) else md_escape(ref.sha, 64)
    return sha + (" (dirty)" if ref.dirty else "")


# -- pieces --------------------------------------------------------------------
def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def headline(c: Comparison) -> str:
    """The one-line verdict: '❌ 2 regressions, 1 failed' / '✅ ...' / '➖ ...'."""
    n = c.counts()
    if n[REGRESSED] or n[FAILED]:
        parts = [_plural(n[REGRESSED], "regression")] if n[REGRESSED] else []
        parts += [f"{n[FAILED]} failed"] if n[FAILED] else []
        parts += [_plural(n[IMPROVED], "improvement")] if n[IMPROVED] else []
        return "❌ " + ", ".join(parts)
    if n[IMPROVED]:
        return f"✅ {_plural(n[IMPROVED], 'improvement')}, no regressions"
    if not c.regimes:
        return "➖ No regimes compared"
    extra = f" ({n[INCONCLUSIVE]} inconclusive)" if n[INCONCLUSIVE] else ""
    return f"➖ No significant change{extra}"


def counts_text(c: Comparison) -> str:
    """'**2** regressed · **1** improved · ...' (regressed/improved always shown)."""
    n = c.counts()
    shown = (f"**{k}** {md_escape(v, 40)}" for v, k in n.items() if k or v in (REGRESSED, IMPROVED))
    return " · ".join(shown)


def verdict_cell(r: RegimeComparison) -> str:
    """Icon and verdict, plus the reason for failed, inconclusive or skipped rows."""
    text = f"{VERDICT_ICON.get(r.verdict, '')} {md_escape(r.verdict, 40)}".strip()
    if r.reason and r.verdict in (FAILED, INCONCLUSIVE, SKIPPED):
        text += ": " + md_escape(r.reason, 120)
    return text


def row(r: RegimeComparison) -> str:
    """One table row; numbers come from perfctl.render.tables, text is escaped."""
    cells = (
        md_escape(r.name),
        md_escape(side_cell(r, "base"), 40),
        md_escape(side_cell(r, "head"), 40),
        change_cell(r),
        verdict_cell(r),
    )
    return "| " + " | ".join(cells) + " |"


def _ref_line(label: str, ref: RefInfo) -> str:
    # A ref given as a sha (ci's merge-base) is not worth saying twice.
    as_sha = len(ref.ref) >= 7 and ref.sha.startswith(ref.ref)
    name = "" if as_sha else f"{md_escape(ref.ref, 100)} · "
    subject = f" · {md_escape(ref.subject)}" if ref.subject else ""
    return f"**{label}** {name}{sha_text(ref)}{subject}"


def _machine_lines(c: Comparison) -> list[str]:
    other: Machine | None = c.head_machine
    if other is None or other.id == c.machine.id:
        return [f"**Machine** {md_escape(c.machine.describe(), 300)}"]
    return [
        f"**Machine (base)** {md_escape(c.machine.describe(), 300)}",
        f"**Machine (head)** {md_escape(other.describe(), 300)} ⚠️ different machines: "
        "the change includes the hardware",
    ]


def stats_note(c: Comparison) -> str:
    """How the verdicts were decided, in one small line."""
    own = own_bands(c)
    bands = f" ({md_escape(own, 300)}: bands of their own)" if own else ""
    return (
        f"<sub>Each worker process is one sample; base and head processes interleave. "
        f"Changed means p &lt; {c.alpha:g} after {md_escape(correction_name(c.correction), 60)} "
        f"correction across {_plural(len(c.regimes), 'regime')} and a confidence interval of the "
        f"change wholly outside ±{c.threshold * 100:g}%{bands}. "
        f"Comparison {md_escape(c.id, 80)} · perfctl {__version__}.</sub>"
    )


def artifact_url(url_base: str, path: str, root: Path | None) -> str:
    """The published URL of an artefact: its path relative to ``root``, quoted."""
    p = Path(path)
    rel: PurePosixPath
    if p.is_absolute():
        try:
            rel = PurePosixPath((p.relative_to(root) if root else Path(p.name)).as_posix())
        except ValueError:
            rel = PurePosixPath(p.name)
    else:
        rel = PurePosixPath(p.as_posix())
    if ".." in rel.parts:  # never point above the published folder
        rel = PurePosixPath(rel.name)
    return f"{url_base}/{quote(rel.as_posix())}"


def _profile_links(rows: list[RegimeComparison], opts: CommentOptions) -> list[str]:
    if not opts.url_base:
        return []
    links = [
        f"[{md_escape(r.name, 80)} · {md_escape(key, 40)}]"
        f"({artifact_url(opts.url_base, path, opts.artifact_root)})"
        for r in rows
        for key, path in sorted(r.artifacts.items())
    ]
    return [f"**Profiles:** {' · '.join(links)}"] if links else []


def _report_line(opts: CommentOptions) -> list[str]:
    if opts.url_base:
        return [f"📊 [Full HTML report]({opts.url_base}/{quote(opts.report_name)})"]
    if opts.run_url:
        return [f"📊 Full HTML report: the `perfctl-report` artefact of [this run]({opts.run_url})"]
    return []


def _warning_lines(c: Comparison) -> list[str]:
    shown = [f"> ⚠️ {md_escape(w, 300)}" for w in c.warnings[:10]]
    if len(c.warnings) > 10:
        shown.append(f"> ⚠️ … and {len(c.warnings) - 10} more warnings (see the report)")
    return shown


# -- composition ---------------------------------------------------------------
def _table(rows: list[RegimeComparison]) -> list[str]:
    return [TABLE_HEAD, *(row(r) for r in rows)]


def _details(rows: list[RegimeComparison]) -> list[str]:
    summary = f"{_plural(len(rows), 'other regime')} (not changed)"
    return ["<details><summary>" + summary + "</summary>", "", *_table(rows), "", "</details>", ""]


def compose(c: Comparison, opts: CommentOptions, *, details: bool, max_changed: int | None) -> str:
    """The body with or without the details rows and with at most ``max_changed``."""
    regimes = c.sorted_regimes()
    changed = [r for r in regimes if r.verdict in CHANGED_VERDICTS]
    others = [r for r in regimes if r.verdict not in CHANGED_VERDICTS]
    shown = changed if max_changed is None else changed[:max_changed]
    omitted = len(changed) - len(shown) + (0 if details else len(others))
    lines = [marker(opts.marker_id), f"### {headline(c)}", "", counts_text(c), ""]
    if shown:
        lines += [*_table(shown), ""]
    if omitted:
        where = f" ([report]({opts.url_base}/{quote(opts.report_name)}))" if opts.url_base else ""
        lines += [f"_{_plural(omitted, 'row')} omitted; see the report{where}._", ""]
    if details and others:
        lines += _details(others)
    lines += [*_warning_lines(c), ""] if c.warnings else []
    lines += [
        _ref_line("Base", c.base) + "  ",
        _ref_line("Head", c.head) + "  ",
        *_machine_lines(c),
        "",
    ]
    placed = placement_notes(c)  # where the workers ran, when --affinity chose it
    lines += [*(md_escape(n) for n in placed), ""] if placed else []
    for extra in _report_line(opts) + _profile_links(shown + (others if details else []), opts):
        lines += [extra, ""]
    lines.append(stats_note(c))
    return "\n".join(lines) + "\n"


def render_comment(c: Comparison, opts: CommentOptions | None = None) -> str:
    """The full comment body, cut down until it fits GitHub's size limit."""
    opts = opts or CommentOptions()
    body = compose(c, opts, details=True, max_changed=None)
    if github_length(body) <= opts.budget:
        return body
    body = compose(c, opts, details=False, max_changed=None)
    if github_length(body) <= opts.budget:
        return body
    # Binary search for the most changed rows that still fit.
    lo, hi = 0, sum(r.verdict in CHANGED_VERDICTS for r in c.regimes)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        fits = github_length(compose(c, opts, details=False, max_changed=mid)) <= opts.budget
        lo, hi = (mid, hi) if fits else (lo, mid - 1)
    return fit(compose(c, opts, details=False, max_changed=lo), opts.budget)


CUT_NOTE = "\n_… cut here to fit GitHub's comment size; see the report._\n"


def fit(body: str, budget: int) -> str:
    """``body``, or its first lines and a note when even the shortest layout is too long
    (hostile input: huge warnings, names or subjects; honest ones fit without this)."""
    if github_length(body) <= budget:
        return body
    room = budget - github_length(CUT_NOTE)
    kept: list[str] = []
    used = 0
    for line in body.split("\n"):
        size = github_length(line) + 1
        if used + size > room:
            break
        kept.append(line)
        used += size
    return "\n".join(kept) + CUT_NOTE
