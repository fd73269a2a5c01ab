"""Commands: comment, ci (Publish) and init (Manage)."""

from __future__ import annotations

import os
import sys
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from perfctl.cli.common import (
    MANAGE,
    PUBLISH,
    AffinityOpt,
    BurstWaitOpt,
    ProjectOpt,
    emit,
    finite,
    guarded,
)
from perfctl.cli.measure import (
    GlobOpt,
    LockWaitOpt,
    RegimesOpt,
    require_tools,
)
from perfctl.cli.signals import MeasuresOpt, parse_measures
from perfctl.errors import UsageError

if TYPE_CHECKING:
    from perfctl.jobs.ci import CiOutcome
    from perfctl.publish.github import CommentResult

RepoOpt = Annotated[
    str | None,
    typer.Option("--repo", help="OWNER/NAME (default: the Actions event or GITHUB_REPOSITORY)."),
]
PrOpt = Annotated[
    int | None,
    typer.Option("--pr", min=1, help="Pull request number (default: the Actions event)."),
]
MarkerOpt = Annotated[
    str,
    typer.Option("--marker-id", help="Suffix of the hidden marker: one comment per suite."),
]
UrlBaseOpt = Annotated[
    str | None,
    typer.Option("--url-base", help="URL where the output folder is published; adds links."),
]


HistoryRemoteOpt = Annotated[
    str, typer.Option("--history-remote", help="The git remote of the history branch.")
]


class CiKind(StrEnum):
    """CI systems `perfctl init --ci` can write workflows for."""

    github = "github"


def _say(text: str) -> None:
    from perfctl.render.escape import strip_unsafe  # names and refs are user text

    sys.stderr.write(strip_unsafe(text) + "\n")
    sys.stderr.flush()


def _report_result(result: CommentResult, where: str) -> None:
    url = f": {result.url}" if result.url else ""
    if result.action == "skipped":
        _say(f"No change and no earlier comment on {where}: nothing posted (--only-on-change).")
    else:
        _say(f"Comment {result.action} on {where}{url}")


@guarded
def comment(
    repo: RepoOpt = None,
    pr: PrOpt = None,
    comparison_id: Annotated[
        str | None, typer.Option("--comparison", help="Stored comparison id or unique prefix.")
    ] = None,
    last: Annotated[bool, typer.Option("--last", help="The newest comparison (default).")] = False,
    comparison_file: Annotated[
        Path | None,
        typer.Option("--comparison-file", help="Render a comparison.json written by `perfctl ci`."),
    ] = None,
    body_file: Annotated[
        Path | None, typer.Option("--body-file", help="Post this pre-rendered markdown as is.")
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the body to stdout; post nothing.")
    ] = False,
    only_on_change: Annotated[
        bool,
        typer.Option(
            "--only-on-change",
            help="Create no comment unless a regime regressed, improved or failed "
            "(an existing one is still updated).",
        ),
    ] = False,
    url_base: UrlBaseOpt = None,
    marker_id: MarkerOpt = "",
    project: ProjectOpt = None,
) -> None:
    """Create or update (in place) the one PR comment with a comparison's verdicts.

    Needs GITHUB_TOKEN (unless --dry-run); GITHUB_API_URL selects GitHub Enterprise.

    Example: perfctl comment --repo octo/app --pr 42 --last --only-on-change
    """
    from perfctl.jobs import ci
    from perfctl.jobs import comment as comment_inputs
    from perfctl.render.comment import marker

    if sum(map(bool, (comparison_id, last, comparison_file, body_file))) > 1:
        raise UsageError(
            "--comparison, --last, --comparison-file and --body-file exclude each other",
            "pick one source for the comment",
        )
    mark = marker(marker_id)
    if body_file is not None:
        if only_on_change:
            raise UsageError(
                "--only-on-change cannot judge a pre-rendered --body-file",
                "use --comparison-file, or decide before posting",
            )
        body, changed = comment_inputs.read_body_file(body_file, mark), None
    else:
        body, changed = comment_inputs.comment_body(
            project, comparison_id, comparison_file, marker_id, url_base
        )
    if dry_run:
        emit(body)
        return
    event, _ = ci.read_event(os.environ)
    ctx = ci.pr_context(event, os.environ, repo, pr)
    if ctx is None:
        raise UsageError(
            "no pull request to comment on",
            "pass --repo OWNER/NAME --pr N, or --dry-run to print the body",
        )
    job = ci.CommentJob(ctx.target, body, mark, changed, only_on_change)
    _report_result(ci.post_comment(job, os.environ), f"{ctx.target.repo}#{ctx.target.number}")


@guarded
def ci_cmd(
    base: Annotated[
        str | None,
        typer.Option(
            "--base", help="Base ref (default: merge-base with the PR base or the default branch)."
        ),
    ] = None,
    head: Annotated[str, typer.Option("--head", help="Head ref.")] = "HEAD",
    fail_on_regression: Annotated[
        bool, typer.Option("--fail-on-regression", help="Exit 1 when a regime regressed.")
    ] = False,
    artifacts: Annotated[
        Path | None, typer.Option("--artifacts", help="Output folder (default: reports/ci).")
    ] = None,
    repo: RepoOpt = None,
    pr: PrOpt = None,
    url_base: UrlBaseOpt = None,
    marker_id: MarkerOpt = "",
    fast: Annotated[bool, typer.Option("--fast", help="6 rounds × 2 values per regime.")] = False,
    rigorous: Annotated[
        bool, typer.Option("--rigorous", help="20–80 rounds, 240 s per regime.")
    ] = False,
    rounds: Annotated[int | None, typer.Option("--rounds", min=1, help="Minimum rounds.")] = None,
    max_rounds: Annotated[
        int | None, typer.Option("--max-rounds", min=1, help="Stop adding rounds here.")
    ] = None,
    time_budget: Annotated[
        float | None,
        typer.Option("--time-budget", callback=finite, min=0, help="Seconds per regime."),
    ] = None,
    burst_wait: BurstWaitOpt = None,
    affinity: AffinityOpt = None,
    threshold: Annotated[
        float | None,
        typer.Option("--threshold", callback=finite, min=0, help="Noise band (default 0.01 = 1%)."),
    ] = None,
    alpha: Annotated[
        float | None,
        typer.Option("--alpha", callback=finite, min=0, max=1, help="Significance level."),
    ] = None,
    confirm: Annotated[
        bool, typer.Option("--confirm", help="Re-measure regressed regimes before reporting.")
    ] = False,
    measure: MeasuresOpt = "time",
    regimes: RegimesOpt = None,
    regime: GlobOpt = None,
    family: Annotated[str | None, typer.Option("--family", help="Only this family.")] = None,
    shard: Annotated[
        str | None,
        typer.Option("--shard", help="K/N: one shard; no comment or gate (`perfctl merge` does)."),
    ] = None,
    shard_run: Annotated[
        str | None, typer.Option("--shard-run", help="Id shared by the shards of one run.")
    ] = None,
    history_branch: Annotated[
        str | None,
        typer.Option(
            "--history-branch",
            help="Pull this git branch's stored history first and push the new results "
            "to it after (retried on push races); default-branch runs only.",
        ),
    ] = None,
    history_remote: HistoryRemoteOpt = "origin",
    project: ProjectOpt = None,
) -> None:
    """Compare in CI: write artefacts and the job summary, comment on the PR, then gate.

    Exit codes: 0 ok, 1 regression (with --fail-on-regression), 2 usage, 3 failed
    regime or GitHub error. The comment is posted whatever the gate decides.

    Example: perfctl ci --fail-on-regression --artifacts reports/ci
    """
    from perfctl.config import load_config
    from perfctl.jobs.ci import CiOptions, run_ci
    from perfctl.jobs.compare import settings_for
    from perfctl.jobs.shard import parse_shard

    signals = parse_measures(measure)
    _check_ci_flags([m.value for m in signals], shard, affinity, burst_wait)
    for m in signals:
        require_tools(m)
    config = load_config(project)
    # Keywords, so mypy flags any change to compare's option handling here too.
    every = [
        settings_for(
            config=config,
            fast=fast,
            rigorous=rigorous,
            rounds=rounds,
            max_rounds=max_rounds,
            values=None,
            min_time=None,
            time_budget=time_budget,
            burst_wait=burst_wait,
            affinity=affinity,
            threshold=threshold,
            alpha=alpha,
            order="abba",
            seed=0,
            confirm=confirm,
            regimes=tuple(regimes or ()),
            globs=tuple(regime or ()),
            family=family,
            shard=parse_shard(shard, shard_run) if shard else None,
            measure=m.value,
        )
        for m in signals
    ]
    opts = CiOptions(
        base=base,
        head=head,
        artifacts=artifacts,
        fail_on_regression=fail_on_regression,
        repo=repo,
        pr=pr,
        marker_id=marker_id,
        url_base=url_base,
        settings=every[0],
        signals=tuple(every[1:]),
        history_branch=history_branch,
        history_remote=history_remote,
    )
    outcome = run_ci(config, opts, os.environ, progress=_progress)
    _finish(outcome)


def _check_ci_flags(
    signals: list[str], shard: str | None, affinity: str | None, burst_wait: float | None
) -> None:
    """Refuse flag combinations before anything is loaded or measured."""
    from perfctl.jobs.settings import refuse_untimed

    if shard and len(signals) > 1:
        raise UsageError(
            "--shard takes one signal at a time (--measure names several)",
            "shard one signal per job, each signal under a --shard-run id of its own, "
            "e.g. --measure time --shard 1/2 --shard-run $GITHUB_RUN_ID-time",
        )
    # With --shard, one signal: its hint names the single-signal way out.
    refuse_untimed(signals, affinity=affinity, burst_wait=burst_wait, several=not shard)


def _progress(message: str) -> None:
    # Plain lines, not a spinner: CI logs are not terminals.
    _say(f"… {message}")


def _finish(outcome: CiOutcome) -> None:
    """Print what ci did (body on stdout, the rest on stderr) and exit with its code."""
    from perfctl.cli.common import print_error
    from perfctl.model import FAILED
    from perfctl.render.comment import headline

    emit(outcome.body)
    for note in outcome.notes:
        _say(f"Warning: {note}")
    every = outcome.comparisons or (outcome.comparison,)
    if len(every) == 1:
        told = headline(outcome.comparison)
    else:  # several signals: each one's headline, so a regression in any is seen
        from perfctl.stats.signals import measure_of

        told = "; ".join(f"{measure_of(c)}: {headline(c)}" for c in every)
    _say(f"{told} · artefacts: " + ", ".join(str(p) for p in outcome.files))
    if outcome.comment is not None:
        ctx = outcome.comment
        _say(f"Comment {ctx.action}{': ' + ctx.url if ctx.url else ''}")
    if outcome.publish_error is not None:
        print_error(outcome.publish_error)
    for line in outcome.history:
        _say(line)
    if outcome.history_error is not None:
        print_error(outcome.history_error)
    failed = list(dict.fromkeys(r.name for c in every for r in c.regimes if r.verdict == FAILED))
    if failed:
        _say(f"Error: {len(failed)} regime(s) failed: {', '.join(failed)}")
        where = "comparison.md and report.html" if len(every) == 1 else "comparison.md"
        _say(f"Hint: {where} show{'s' * (len(every) > 1)} each failure's reason")
    raise typer.Exit(outcome.exit_code)


@guarded
def init(
    ci: Annotated[
        CiKind | None, typer.Option("--ci", help="Also write CI workflows (github).")
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Overwrite files perfctl init wrote before.")
    ] = False,
    install: Annotated[
        str | None,
        typer.Option(
            "--install",
            help="What the workflows pip-install (default: this perfctl's version, "
            "perfctl==VERSION); a requirement, URL or path.",
        ),
    ] = None,
    shards: Annotated[
        int,
        typer.Option(
            "--shards", help="Split the CI comparison over N runners, merged by one fan-in job."
        ),
    ] = 1,
    project: ProjectOpt = None,
) -> None:
    """Set a project up: perfctl config, a starter regimes file and, optionally, CI workflows.

    Example: perfctl init --ci github --shards 4
    """
    from perfctl.jobs.scaffold import DEFAULT_INSTALL, init_project

    root = (project or Path.cwd()).resolve()
    kind = ci.value if ci else None
    for step in init_project(root, kind, force, install or DEFAULT_INSTALL, shards):
        emit(f"{step.action:<11} {step.path.relative_to(root)}")


@guarded
def sync(
    branch: Annotated[str, typer.Argument(help="The history branch, e.g. perfctl-data.")],
    remote: Annotated[str, typer.Option("--remote", help="The branch's git remote.")] = "origin",
    pull_only: Annotated[
        bool, typer.Option("--pull-only", help="Only pull the branch's records; push nothing.")
    ] = False,
    lock_wait: LockWaitOpt = 600.0,
    project: ProjectOpt = None,
) -> None:
    """Pull a history branch's runs and comparisons into the store, then push the new local ones.

    The branch is never checked out; records are only ever added (push races retried).

    Example: perfctl sync perfctl-data && perfctl report --history
    """
    from perfctl.config import load_config
    from perfctl.jobs import history

    outcome = history.sync(
        load_config(project), branch, remote, not pull_only, _progress, lock_wait=lock_wait
    )
    for line in history.describe(outcome):
        _say(line)


def register(app: typer.Typer) -> None:
    """Add comment, ci, sync and init."""
    app.command("comment", rich_help_panel=PUBLISH)(comment)
    app.command("ci", rich_help_panel=PUBLISH)(ci_cmd)
    app.command("sync", rich_help_panel=PUBLISH)(sync)
    app.command("init", rich_help_panel=MANAGE)(init)
