"""`perfctl comment`'s inputs: a stored comparison, a comparison.json, or a pre-rendered body."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from perfctl.errors import UsageError
from perfctl.model import Comparison


# -- `perfctl comment` inputs ----------------------------------------------------------
def comment_body(
    project: Path | None,
    comparison_id: str | None,
    comparison_file: Path | None,
    marker_id: str,
    url_base: str | None,
) -> tuple[str, bool]:
    """The body for a stored comparison or a comparison.json, and whether it changed."""
    from perfctl.render.comment import CommentOptions, check_url_base, has_changes, render_comment
    from perfctl.store.schema import read_comparisons_file

    base_url = check_url_base(url_base)
    if comparison_file is not None:
        # comparison.json, or ci's signals.json of several signals (--measure a,b)
        cs, root, report = read_comparisons_file(comparison_file), None, "report.html"
    else:
        c, root = stored_comparison(project, comparison_id)
        cs, report = (c,), f"comparison-{c.id}.html"  # what `perfctl report` writes there
    opts = CommentOptions(
        marker_id=marker_id, url_base=base_url, artifact_root=root, report_name=report
    )
    changed = any(has_changes(c) for c in cs)
    if len(cs) > 1:
        from perfctl.render.signals import signals_comment

        return signals_comment(cs, opts), changed
    return render_comment(cs[0], opts), changed


def stored_comparison(project: Path | None, comparison_id: str | None) -> tuple[Comparison, Path]:
    """The chosen stored comparison (absolute artefact paths) and the reports dir."""
    from perfctl.config import load_config
    from perfctl.store.local import open_store

    config = load_config(project)
    store = open_store(config.state_dir, config.store_url)
    c = store.load_comparison(comparison_id) if comparison_id else store.last_comparison()
    return absolute_artifacts(c, config.root), config.reports_dir


def absolute_artifacts(c: Comparison, root: Path) -> Comparison:
    """Artefact paths made absolute (relative ones are relative to ``root``)."""
    rows = tuple(
        replace(r, artifacts={k: str(root / v) for k, v in r.artifacts.items()})
        if any(not Path(v).is_absolute() for v in r.artifacts.values())
        else r
        for r in c.regimes
    )
    return replace(c, regimes=rows)


def read_body_file(path: Path, mark: str) -> str:
    """A pre-rendered body with the marker as its first line, within GitHub's limit."""
    from perfctl.files import read_prefix
    from perfctl.render.comment import GITHUB_LIMIT, github_length, with_marker

    cap = 4 * GITHUB_LIMIT  # bytes; more cannot fit, so /dev/zero is never read whole
    try:
        raw = read_prefix(path, cap + 1)
        body = with_marker(raw.decode("utf-8", "replace" if len(raw) > cap else "strict"), mark)
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {path}: {exc}", "check the path") from exc
    if len(raw) > cap or github_length(body) > GITHUB_LIMIT:
        raise UsageError(
            f"{path} holds {'over ' * (len(raw) > cap)}{github_length(body):,} characters; "
            f"GitHub accepts {GITHUB_LIMIT:,}",
            "post the comparison instead: perfctl truncates its own bodies to fit",
        )
    return body
