"""`perfctl ci` and `perfctl comment`: compare in CI, write artefacts, post the PR comment.

``run_ci`` reads as the pipeline: find the PR context and the base → compare
→ copy profiles into the artefacts folder → write comparison.json,
comparison.md (the comment body) and report.html → append the body to the
job summary → post or update the PR comment → decide the exit code. The
comment is posted before the gate decides, so a failing gate still explains
itself on the PR.

GitHub Actions context comes from the environment: ``GITHUB_EVENT_PATH`` (the
event JSON: ``pull_request.number``, ``repository.full_name``, the PR's head
repository to spot forks, ``pull_request.base.sha``), ``GITHUB_REPOSITORY``,
``GITHUB_STEP_SUMMARY`` and, for the run link, ``GITHUB_SERVER_URL`` and
``GITHUB_RUN_ID``.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from perfctl.config import Config
from perfctl.errors import (
    EXIT_FAILURE,
    EXIT_OK,
    EXIT_REGRESSION,
    GitError,
    PerfctlError,
    PublishError,
    UsageError,
)
from perfctl.files import (
    ARTEFACT,
    check_output_dir,
    check_output_file,
    ensure_output_dir,
    write_output,
)
from perfctl.measure.executor import PYPERF, Executor
from perfctl.model import FAILED, REGRESSED, Comparison, to_dict
from perfctl.publish.github import CommentResult, Target, parse_target
from perfctl.render.comment import CommentOptions, check_url_base, marker, render_comment

DEFAULT_ARTIFACTS = Path("reports") / "ci"
TOKEN_HINT = (
    "export a token allowed to write pull requests (in GitHub Actions: "
    "`env: GITHUB_TOKEN: ${{ secrets.GITHUB_TOKEN }}`), or use --dry-run to print "
    "the body"
)


@dataclass(frozen=True)
class PrContext:
    """The pull request a run belongs to, from the event file or --repo/--pr."""

    target: Target
    fork: bool = False  # the PR's head lives in another repository
    base_sha: str | None = None


@dataclass(frozen=True)
class CommentJob:
    """One comment to post: where, what, and whether it reports a change."""

    target: Target
    body: str
    mark: str
    changed: bool | None = None  # None: unknown (a pre-rendered --body-file)
    only_on_change: bool = False


@dataclass(frozen=True)
class CiOptions:
    """What `perfctl ci` compares, where it writes and whether it gates."""

    base: str | None = None
    head: str = "HEAD"
    artifacts: Path | None = None  # default: <root>/reports/ci
    fail_on_regression: bool = False
    repo: str | None = None
    pr: int | None = None
    marker_id: str = ""
    url_base: str | None = None
    regimes: list[str] | None = None
    settings: Any = None  # perfctl.jobs.compare.CompareSettings
    # More signals (--measure time,instructions): their settings, measured after `settings`.
    signals: tuple[Any, ...] = ()
    history_branch: str | None = None  # pull before, push after (jobs/history.py)
    history_remote: str = "origin"


@dataclass(frozen=True)
class CiOutcome:
    """What `perfctl ci` did; the command prints it and exits with ``exit_code``."""

    comparison: Comparison
    body: str
    files: tuple[Path, ...]
    notes: tuple[str, ...] = ()
    comment: CommentResult | None = None
    publish_error: PublishError | None = None
    exit_code: int = EXIT_OK
    history: tuple[str, ...] = ()  # what the history branch sync did
    history_error: PerfctlError | None = None
    comparisons: tuple[Comparison, ...] = ()  # every signal's (the first is ``comparison``)


# -- GitHub Actions context -------------------------------------------------------
def read_event(env: Mapping[str, str]) -> tuple[dict[str, Any], str | None]:
    """The event JSON from ``GITHUB_EVENT_PATH`` ({} if unset) and a warning, if any."""
    path = env.get("GITHUB_EVENT_PATH")
    if not path:
        return {}, None
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return {}, f"cannot read GITHUB_EVENT_PATH {path}: {type(exc).__name__}"
    return (data, None) if isinstance(data, dict) else ({}, f"{path} is not a JSON object")


def _get(data: Any, *keys: str) -> Any:
    for key in keys:
        data = data.get(key) if isinstance(data, dict) else None
    return data


def pr_context(
    event: Mapping[str, Any], env: Mapping[str, str], repo: str | None = None, pr: int | None = None
) -> PrContext | None:
    """The PR to comment on: --repo/--pr win over the event; None outside a PR."""
    event_repo = _get(event, "repository", "full_name") or env.get("GITHUB_REPOSITORY")
    number = pr if pr is not None else _get(event, "pull_request", "number")
    if number is None:
        if repo is not None:
            raise UsageError(
                "--repo needs --pr outside a pull_request event", "pass --pr N as well"
            )
        return None
    slug = repo or event_repo
    if not isinstance(slug, str) or not slug:
        raise UsageError(
            "--pr needs --repo OWNER/NAME outside GitHub Actions", "pass --repo OWNER/NAME as well"
        )
    if not isinstance(number, int):
        raise UsageError(
            f"the event's pull_request.number is not a number: {number!r:.40}",
            "pass --pr N explicitly",
        )
    target = parse_target(slug, number)
    head_repo = _get(event, "pull_request", "head", "repo", "full_name")
    fork = bool(head_repo) and head_repo != _get(event, "repository", "full_name")
    return PrContext(target, fork, _get(event, "pull_request", "base", "sha"))


def run_url(env: Mapping[str, str]) -> str | None:
    """The Actions run's page (holds the uploaded artefacts), when known."""
    keys = ("GITHUB_SERVER_URL", "GITHUB_REPOSITORY", "GITHUB_RUN_ID")
    if not all(env.get(k) for k in keys):
        return None
    server, repo, run = (env[k] for k in keys)
    return f"{server.rstrip('/')}/{repo}/actions/runs/{run}"


def default_base(root: Path, head: str, ctx: PrContext | None) -> str:
    """The merge-base of ``head`` with the PR's base (or the default branch)."""
    from perfctl.git import refs as gitrefs

    other = ctx.base_sha if ctx and ctx.base_sha else gitrefs.default_branch(root)
    try:
        return gitrefs.merge_base(root, other, head)
    except GitError as exc:
        raise GitError(
            exc.message, "in GitHub Actions check out with `fetch-depth: 0`, or pass --base REF"
        ) from exc


# -- posting ----------------------------------------------------------------------
def post_comment(job: CommentJob, env: Mapping[str, str]) -> CommentResult:
    """Create or update the marked comment; --only-on-change never creates one."""
    from perfctl.publish.github import (
        GitHub,
        api_url_from_env,
        policy_from_env,
        token_from_env,
        upsert_comment,
    )

    token = token_from_env(env)
    if token is None:
        raise UsageError("GITHUB_TOKEN is not set, so the comment cannot be posted", TOKEN_HINT)
    # With nothing changed, refresh an old comment (it may still say
    # "regression") but never start a new one.
    create = not (job.only_on_change and job.changed is False)
    with GitHub(token, api_url_from_env(env), policy_from_env(env)) as gh:
        return upsert_comment(gh, job.target, job.body, job.mark, create=create)


# -- artefacts --------------------------------------------------------------------


def artifacts_dir(path: Path) -> Path:
    """The --artifacts folder, checked before any work: a real folder or a new path."""
    return check_output_dir(path, "the --artifacts folder").resolve()


def collect_profiles(c: Comparison, root: Path, dest: Path) -> Comparison:
    """Copy every existing artefact (flamegraphs...) to ``dest/profiles``.

    The copies are recorded relative to ``dest``, so comparison.json and the
    links in the comment stay right wherever the folder is uploaded.
    """
    from perfctl.store.local import slug

    rows = []
    for r in c.regimes:
        moved: dict[str, str] = {}
        for key, raw in r.artifacts.items():
            src = Path(raw) if Path(raw).is_absolute() else root / raw
            if not src.is_file():
                moved[key] = str(src)
                continue
            target = dest / "profiles" / f"{slug(r.name)}-{slug(key)}{src.suffix}"
            check_output_dir(target.parent, "profiles")
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, check_output_file(target, "a profile"))
            moved[key] = target.relative_to(dest).as_posix()
        rows.append(replace(r, artifacts=moved) if moved != r.artifacts else r)
    return replace(c, regimes=tuple(rows))


def write_artifacts(
    c: Comparison, body: str, dest: Path, ctx: PrContext | None
) -> tuple[list[Path], list[str]]:
    """comparison.json, comparison.md, report.html (and pr-number.txt); files, notes.

    Artefact paths in ``c`` are relative to ``dest`` (see collect_profiles).
    """
    files = [dest / "comparison.json", dest / "comparison.md"]
    write_output(files[0], json.dumps(to_dict(c), indent=1, sort_keys=True) + "\n", ARTEFACT)
    write_output(files[1], body, ARTEFACT)
    if ctx is not None:
        # For the fork-safe workflow_run job, which only trusts a number.
        files.append(dest / "pr-number.txt")
        write_output(files[-1], f"{ctx.target.number}\n", ARTEFACT)
    notes = []
    try:
        files.append(_write_report(c, dest, dest / "report.html"))
    except ImportError as exc:
        notes.append(f"HTML report skipped: {exc}")
    except Exception as exc:  # noqa: BLE001 - the report must not cost the comment
        notes.append(f"HTML report skipped: {type(exc).__name__}: {getattr(exc, 'message', exc)}")
    return files, notes


def _write_report(c: Comparison, root: Path, out: Path) -> Path:
    from perfctl.render.html_report import render_comparison

    # Relative artefact paths resolve against ``root``: the artefacts folder.
    return render_comparison(c, project_root=root, out=out)


def append_step_summary(env: Mapping[str, str], body: str) -> str | None:
    """Append the body to ``$GITHUB_STEP_SUMMARY``; a warning if that fails."""
    path = env.get("GITHUB_STEP_SUMMARY")
    if not path:
        return None
    try:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(body if body.endswith("\n") else body + "\n")
    except OSError as exc:
        return f"cannot append to GITHUB_STEP_SUMMARY: {exc}"
    return None


def gate_exit_code(c: Comparison, fail_on_regression: bool) -> int:
    """3 when a regime failed, 1 on regression (or a regime over its max_peak) when
    gating, else 0."""
    verdicts = {r.verdict for r in c.regimes}
    if FAILED in verdicts:
        return EXIT_FAILURE
    over = any(r.over_limit for r in c.regimes)
    return EXIT_REGRESSION if fail_on_regression and (REGRESSED in verdicts or over) else EXIT_OK


# -- the pipeline -----------------------------------------------------------------
def run_ci(
    config: Config,
    opts: CiOptions,
    env: Mapping[str, str],
    progress: Callable[[str], None] | None = None,
    executor: Executor = PYPERF,
) -> CiOutcome:
    """Compare, write artefacts, post the comment, then decide the exit code."""
    from perfctl.jobs import signals
    from perfctl.render.signals import signals_comment

    mark, url_base = marker(opts.marker_id), check_url_base(opts.url_base)  # fail early
    event, warning = read_event(env)
    notes = [warning] if warning else []
    ctx = pr_context(event, env, opts.repo, opts.pr)
    dest = artifacts_dir(opts.artifacts or config.root / DEFAULT_ARTIFACTS)
    base = opts.base or default_base(config.root, opts.head, ctx)
    history, _ = _sync_history(config, opts, progress, push=False)  # stored durations, reuse
    every = [opts.settings, *opts.signals]
    measured = signals.measure_all(config, base, opts.head, every, progress, opts.regimes, executor)
    ensure_output_dir(config.reports_dir, dest)
    cs = tuple(collect_profiles(c, config.root, dest) for c in measured)
    c = cs[0]
    copts = CommentOptions(marker_id=opts.marker_id, url_base=url_base, run_url=run_url(env))
    body = render_comment(c, copts) if len(cs) == 1 else signals_comment(cs, copts)
    files, report_notes = write_artifacts(c, body, dest, ctx)
    files += signals.write_signals(cs, dest) if len(cs) > 1 else []
    notes += report_notes
    summary_note = append_step_summary(env, body)
    notes += [summary_note] if summary_note else []
    shard = opts.settings.shard if opts.settings is not None else None
    if shard is not None:
        # One shard of many: the fan-in job merges, comments once and gates.
        comment, error = None, None
        notes.append(f"shard {shard.label()}: `perfctl merge` in the fan-in job comments and gates")
        code = gate_all(cs, False)
    else:
        comment, error, why_not = _maybe_post(ctx, body, mark, env)
        notes += [why_not] if why_not else []
        code = EXIT_FAILURE if error is not None else gate_all(cs, opts.fail_on_regression)
    pushed, history_error = _sync_history(config, opts, progress, push=True)
    if history_error is not None and code == EXIT_OK:
        code = EXIT_FAILURE  # asked to keep the history and could not; a verdict still wins
    outcome = CiOutcome(c, body, tuple(files), tuple(notes), comment, error, code)
    return replace(
        outcome, history=(*history, *pushed), history_error=history_error, comparisons=cs
    )


def gate_all(cs: tuple[Comparison, ...], fail_on_regression: bool) -> int:
    """The worst of every signal's gate: 3 (a regime failed), then 1, then 0."""
    codes = [gate_exit_code(c, fail_on_regression) for c in cs]
    return EXIT_FAILURE if EXIT_FAILURE in codes else max(codes)


def _sync_history(
    config: Config, opts: CiOptions, progress: Callable[[str], None] | None, *, push: bool
) -> tuple[list[str], PerfctlError | None]:
    """Pull (before measuring) or pull and push (after) the history branch, if asked."""
    if opts.history_branch is None:
        return [], None
    from perfctl.jobs import history

    try:
        done = history.sync(config, opts.history_branch, opts.history_remote, push, progress)
    except UsageError as exc:
        if push:  # checked before measuring: the branch changed meanwhile; keep the outcome
            return [], exc
        raise
    except Exception as exc:  # noqa: BLE001 - the history must never cost the verdict
        error = (
            exc if isinstance(exc, PerfctlError) else history.failed(repr(exc), opts.history_branch)
        )
        if not push:  # the push after measuring fetches again; measure anyway
            return [f"Warning: {error.message}"], None
        return [], error
    return history.describe(done, quiet=push), None


def _maybe_post(
    ctx: PrContext | None, body: str, mark: str, env: Mapping[str, str]
) -> tuple[CommentResult | None, PublishError | None, str | None]:
    if ctx is None:
        return None, None, None
    if ctx.fork:
        return (
            None,
            None,
            (
                "pull request from a fork: its token is read-only, so the comment "
                "is left to the workflow_run job (comparison.json, pr-number.txt)"
            ),
        )
    if not env.get("GITHUB_TOKEN", "").strip():
        return None, None, "GITHUB_TOKEN is not set: the PR comment was not posted"
    job = CommentJob(ctx.target, body, mark)
    try:
        return post_comment(job, env), None, None
    except PublishError as exc:
        return None, exc, None
