"""Profiles of a comparison's commits made apart from it, by `perfctl profile --vs`.

`perfctl compare --profile` stores its artefacts in the comparison. A profile
diff taken later with ``perfctl profile REGIME --ref HEAD --vs BASE`` lives only
under ``<reports>/profiles/``; this module finds the ones that belong to a
comparison (the same regime, before = the comparison's base commit and
after = its head commit, dirty flags alike), so the report links them too.
Each side's profile folder is named by ref and may since have been replaced by
a profile of another commit: such a side is left out, never shown as this
comparison's.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from perfctl.model import Comparison, RefInfo, SchemaMismatch
from perfctl.profile.records import DiffSummary, load_diff, load_summary, slug
from perfctl.render.escape import shell_command

# summary.json "files" keys -> RegimeComparison.artifacts suffixes (as compare --profile names them)
_SIDE_KEYS = {
    "flame_svg": "flamegraph",
    "speedscope": "speedscope",
    "collapsed": "collapsed",
    "summary": "profile_summary",
}


def profile_command(regime: str, c: Comparison) -> str:
    """The `perfctl profile` command whose diff this comparison's report links."""
    args = ("profile", regime, "--ref", _ref_arg(c.head), "--vs", _ref_arg(c.base))
    return shell_command("perfctl", *args)


def _ref_arg(ref: RefInfo) -> str:
    return "WORKTREE" if ref.ref == "WORKTREE" else ref.sha[:10]


def _same(a: RefInfo, b: RefInfo) -> bool:
    return a.sha == b.sha and a.dirty == b.dirty


def matching_diff(reports_dir: Path, regime: str, c: Comparison) -> tuple[Path, DiffSummary] | None:
    """The newest stored profile diff of ``regime`` from base to head, if any."""
    found: list[tuple[str, Path, DiffSummary]] = []
    for path in sorted((reports_dir / "profiles" / slug(regime)).glob("*-vs-*/diff.json")):
        try:
            d = load_diff(path)
        except (OSError, ValueError, KeyError, TypeError, SchemaMismatch):
            continue  # a damaged or foreign file is not this comparison's profile
        if d.regime == regime and _same(d.before.ref, c.base) and _same(d.after.ref, c.head):
            found.append((d.created, path, d))
    if not found:
        return None
    _, path, d = max(found, key=lambda f: (f[0], str(f[1])))
    return path, d


def diff_artifacts(path: Path, d: DiffSummary) -> dict[str, str]:
    """Artefact paths by name, as `compare --profile` stores them, for one found diff."""
    out: dict[str, str] = {}
    for prefix, side in (("base_", d.before), ("head_", d.after)):
        try:
            s = load_summary(Path(side.summary))
        except (OSError, ValueError, KeyError, TypeError, SchemaMismatch):
            continue
        if _same(s.ref, side.ref):
            out.update({prefix + _SIDE_KEYS[k]: v for k, v in s.files.items() if k in _SIDE_KEYS})
    folder = path.parent
    out["diff_flamegraph"] = str(folder / "diff.svg")
    out["diff_flamegraph_reverse"] = str(folder / "diff-reverse.svg")
    out["profile_diff"] = str(path)
    return out


def link_profiles(reports_dir: Path, c: Comparison) -> Comparison:
    """``c`` with the matching `perfctl profile --vs` diffs linked to regimes that have none."""
    rows = []
    for r in c.regimes:
        found = None if r.artifacts else matching_diff(reports_dir, r.name, c)
        rows.append(replace(r, artifacts=diff_artifacts(*found)) if found else r)
    return replace(c, regimes=tuple(rows))
