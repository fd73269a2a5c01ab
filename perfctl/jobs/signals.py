"""`compare --measure time,instructions,memory`: one comparison per signal, grouped.

Each signal is a whole `compare` of its own (its own worker processes, so no
signal is measured under another's instrumentation: callgrind would slow wall
time 50x, tracemalloc would add allocations to the count), run one after the
other over the same worktrees and environments. The stored comparisons carry
the group in their settings (``signals``: every signal asked for, ``signals_group``:
an id shared by the group), so `report` and the store can tell them apart.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from perfctl.config import Config
from perfctl.jobs import compare as comparing
from perfctl.jobs.compare import CompareSettings, Progress
from perfctl.measure.executor import PYPERF, Executor
from perfctl.model import Comparison, Notice
from perfctl.store.local import new_id, open_store


def _tagged(say: Progress, measure: str) -> Progress:
    """Progress prefixed with the signal; a Notice (or a Fact) keeps its kind."""

    def tell(msg: str) -> None:
        text = f"{measure}: {msg}"
        say(type(msg)(text) if isinstance(msg, Notice) else text)

    return tell


def compare_signals(
    config: Config,
    base: str,
    head: str,
    settings: Sequence[CompareSettings],
    progress: Progress | None = None,
    *,
    regimes: list[str] | None = None,
    executor: Executor = PYPERF,
) -> tuple[Comparison, ...]:
    """Compare BASE and HEAD once per signal; the stored comparisons, in signal order."""
    say = progress or (lambda _msg: None)
    group = new_id()
    signals = [s.schedule.measure for s in settings]
    out = []
    for s in settings:
        c = comparing.compare_refs(
            config, base, head, regimes=regimes, settings=s,
            progress=_tagged(say, s.schedule.measure), executor=executor,
        )  # fmt: skip
        c = replace(c, settings={**c.settings, "signals": signals, "signals_group": group})
        open_store(config.state_dir, config.store_url).save_comparison(c)
        out.append(c)
    return tuple(out)


def measure_all(
    config: Config,
    base: str,
    head: str,
    every: Sequence[CompareSettings | None],
    progress: Progress | None,
    regimes: list[str] | None,
    executor: Executor,
) -> tuple[Comparison, ...]:
    """One comparison (``every`` has one entry; None = the defaults), or one per signal."""
    if len(every) > 1:
        chosen = [s for s in every if s is not None]
        return compare_signals(
            config, base, head, chosen, progress, regimes=regimes, executor=executor
        )
    c = comparing.compare_refs(
        config, base, head, regimes=regimes, settings=every[0], progress=progress,
        executor=executor,
    )  # fmt: skip
    return (c,)


def write_signals(cs: tuple[Comparison, ...], dest: Path) -> list[Path]:
    """signals.json (side by side) and comparison-<signal>.json per signal."""
    import json

    from perfctl.files import ARTEFACT, write_output
    from perfctl.model import to_dict
    from perfctl.render.signals import signals_json
    from perfctl.stats.signals import measure_of

    files = [dest / "signals.json"]
    write_output(files[0], signals_json(cs) + "\n", ARTEFACT)
    for c in cs:
        files.append(dest / f"comparison-{measure_of(c)}.json")
        write_output(files[-1], json.dumps(to_dict(c), indent=1, sort_keys=True) + "\n", ARTEFACT)
    return files
