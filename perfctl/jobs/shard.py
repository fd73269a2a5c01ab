"""Sharded comparisons: a deterministic split of the regimes, and merging the shards.

Both refs of a regime are always measured interleaved on one machine, so a
shard's verdicts never mix machines; splitting by regime keeps every pair
together. A regime and its ``baseline=`` regime stay in one shard (the Slowdown
column needs both). ``merge`` puts the shards of one sharded run back together
and recomputes every verdict, Benjamini-Hochberg included, across all regimes.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol, TypeVar

from perfctl.caveats import Caveat, WarningKind, kind_of
from perfctl.config import Config
from perfctl.errors import UsageError
from perfctl.model import Comparison, RegimeResult

_SHARD = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` (1-based) of ``count``, of the sharded run ``run``."""

    index: int
    count: int
    run: str

    def label(self) -> str:
        """``K/N``."""
        return f"{self.index}/{self.count}"


def parse_shard(text: str, run: str | None = None) -> Shard:
    """``K/N`` from ``--shard``; the run id defaults to ``$GITHUB_RUN_ID`` or ``local``."""
    m = _SHARD.match(text)
    if not m or not 1 <= int(m.group(1)) <= int(m.group(2)):
        raise UsageError(
            f"--shard takes K/N with 1 <= K <= N (got `{text}`)", "for example --shard 2/4"
        )
    run_id = run or os.environ.get("GITHUB_RUN_ID") or "local"
    if not re.fullmatch(r"[A-Za-z0-9._-]{1,64}", run_id):
        raise UsageError(
            f"shard run id `{run_id}` is not a plain name", "use letters, digits, . _ -"
        )
    return Shard(int(m.group(1)), int(m.group(2)), run_id)


class _Named(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def baseline(self) -> str | None: ...


R = TypeVar("R", bound=_Named)


def split(regimes: Sequence[R], shard: Shard) -> list[R]:
    """This shard's regimes: whole groups (a regime with its baseline), dealt in name order."""
    groups: dict[str, list[R]] = {}
    names = {r.name for r in regimes}
    for r in regimes:
        key = r.baseline if r.baseline in names else r.name
        groups.setdefault(key or r.name, []).append(r)
    keys = sorted(groups)
    mine = {k for i, k in enumerate(keys) if i % shard.count == shard.index - 1}
    return [r for r in regimes if (r.baseline if r.baseline in names else r.name) in mine]


def shard_of(c: Comparison) -> Shard | None:
    """The shard a stored comparison measured, if it was one."""
    s = c.settings.get("shard")
    if not isinstance(s, dict):
        return None
    return Shard(int(s["index"]), int(s["count"]), str(s["run"]))


def _check(shards: Sequence[Comparison]) -> list[Shard]:
    marks = [shard_of(c) for c in shards]
    missing_mark = [c.id for c, m in zip(shards, marks, strict=True) if m is None]
    if missing_mark:
        raise UsageError(
            f"not a shard: comparison {', '.join(missing_mark)}",
            "merge takes comparisons made with `perfctl compare … --shard K/N`",
        )
    got = [m for m in marks if m is not None]
    for what, values in (
        ("sharded runs", {m.run for m in got}),
        ("shard counts", {m.count for m in got}),
        ("base commits", {c.base.sha for c in shards}),
        ("head commits", {c.head.sha for c in shards}),
    ):
        if len(values) > 1:
            raise UsageError(
                f"the shards come from different {what}: {', '.join(sorted(map(str, values)))}",
                "merge the shards of one `perfctl compare … --shard K/N` run",
            )
    _check_decided_alike(shards)
    return got


# What a merged verdict is decided with, or what its figures mean: shards of one run
# share them, and a merge of shards that differ would re-decide some rows under
# settings they were not asked for (the first shard's band, say) or put counts of
# different things in one table.
_ALIKE = ("measure", "clock", "pairing")


def _check_decided_alike(shards: Sequence[Comparison]) -> None:
    seen: dict[str, set[float] | set[str]] = {
        "--threshold": {c.threshold for c in shards},
        "--alpha": {c.alpha for c in shards},
    }
    for key in _ALIKE:  # a key an older record lacks is left out, not a difference
        seen[f"--{key}"] = {str(c.settings.get(key) or "") for c in shards} - {""}
    for flag, values in seen.items():
        if len(values) > 1:
            shown = " and ".join(
                f"{v:g}" if isinstance(v, float) else str(v) for v in sorted(values)
            )
            raise UsageError(
                f"the shards were measured or decided differently ({flag} {shown})",
                "give each signal's shard jobs a --shard-run id of their own and merge "
                "each run apart"
                if flag == "--measure"
                else "merge the shards of one `perfctl compare … --shard K/N` run; "
                "give every shard job the same options",
            )


def _complete(marks: Sequence[Shard]) -> None:
    count = marks[0].count
    seen = [m.index for m in marks]
    dup = sorted({i for i in seen if seen.count(i) > 1})
    if dup:
        raise UsageError(
            f"shard {', '.join(f'{i}/{count}' for i in dup)} given more than once",
            "pass each shard's comparison once",
        )
    missing = [i for i in range(1, count + 1) if i not in seen]
    if missing:
        raise UsageError(
            f"shard {', '.join(f'{i}/{count}' for i in missing)} missing",
            "wait for every shard job, or pass its comparison file",
        )


def _results(c: Comparison) -> dict[str, dict[str, RegimeResult]]:
    """The measured results a shard's rows were decided from."""
    from perfctl.stats import verdicts

    return {r.name: verdicts.sides_of([r]) for r in c.regimes}


def merge(shards: Sequence[Comparison], new_id: str, created: str) -> Comparison:
    """One comparison from every shard of a run, verdicts recomputed across all regimes."""
    from perfctl.stats import verdicts

    if not shards:
        raise UsageError(
            "nothing to merge", "pass the shards' comparison files or ids, or --shard-run ID"
        )
    marks = _check(shards)
    _complete(marks)
    measured: dict[str, dict[str, RegimeResult]] = {}
    for c in shards:
        for name, sides in _results(c).items():
            if name in measured:
                raise UsageError(f"regime `{name}` is in two shards", "shards must not overlap")
            measured[name] = sides
    first = min(shards, key=lambda c: shard_of(c).index if shard_of(c) else 0)  # type: ignore[union-attr]
    rows = verdicts.decide_all(
        measured,
        threshold=first.threshold,
        alpha=first.alpha,
        pairing=str(first.settings.get("pairing", "process")),
    )
    # Failed and skipped rows keep their shard's own reason; the rest are recomputed.
    kept = {r.name: r for c in shards for r in c.regimes if r.verdict in ("failed", "skipped")}
    artifacts = {r.name: r.artifacts for c in shards for r in c.regimes if r.artifacts}
    rows = [kept.get(r.name) or replace(r, artifacts=artifacts.get(r.name, {})) for r in rows]
    from perfctl.measure.machine import common_cpus

    return replace(
        first,
        id=new_id,
        created=created,
        regimes=tuple(rows),
        settings={
            **first.settings,
            "shard": None,
            "merged_from": _provenance(shards),
            # Every shard's holds, not the first one's.
            "burst_held": round(sum(float(c.settings.get("burst_held") or 0) for c in shards), 1),
            # Pinned alike, or not said at all (the warning says how they differed).
            "affinity": list(common_cpus(c.settings.get("affinity") or () for c in shards)),
        },
        warnings=_warnings(shards),
    )


def _provenance(shards: Sequence[Comparison]) -> list[dict[str, Any]]:
    ordered = sorted(shards, key=lambda c: shard_of(c).index)  # type: ignore[union-attr]
    return [
        {"comparison": c.id, "shard": shard_of(c).label(), "machine": c.machine.id}  # type: ignore[union-attr]
        for c in ordered
    ]


def _warnings(shards: Sequence[Comparison]) -> tuple[Caveat, ...]:
    out: list[Caveat] = []
    for c in shards:
        label = shard_of(c).label()  # type: ignore[union-attr]
        out.extend(Caveat(f"shard {label}: {w}", kind_of(w)) for w in c.warnings if w not in out)
    from perfctl.measure.machine import format_cpus

    placements = sorted({format_cpus(c.settings.get("affinity") or ()) for c in shards})
    placements = [p or "not pinned" for p in placements]
    if len(placements) > 1:
        out.append(
            Caveat(
                f"the shards pinned their workers differently (--affinity: "
                f"{', '.join(placements)}): the merged comparison names no placement",
                WarningKind.PLACEMENT_DIFFERS,
            )
        )
    machines = sorted({c.machine.id for c in shards})
    if len(machines) > 1:
        out.append(
            Caveat(
                f"the shards ran on different machines ({', '.join(machines)}): each regime's "
                "base and head still shared one machine, but figures across regimes do not",
                WarningKind.MACHINES_DIFFER,
            )
        )
    return tuple(out)


def load_inputs(config: Config, inputs: Sequence[str]) -> list[Comparison]:
    """Comparisons from files, directories of artefacts (``comparison.json``) or stored ids."""
    from pathlib import Path

    from perfctl.store.local import open_store
    from perfctl.store.schema import read_comparison_file

    out: list[Comparison] = []
    for item in inputs:
        path = Path(item)
        if path.is_dir():
            found = sorted(path.rglob("comparison.json"))
            if not found:
                raise UsageError(f"no comparison.json under {path}", "pass the shards' artefacts")
            out.extend(read_comparison_file(f) for f in found)
        elif path.is_file():
            out.append(read_comparison_file(path))
        else:
            out.append(open_store(config.state_dir, config.store_url).load_comparison(item))
    return out


def stored_shards(config: Config, run: str) -> list[Comparison]:
    """Every stored shard of sharded run ``run``; a re-run shard replaces its earlier one."""
    from perfctl.store.local import open_store

    store = open_store(config.state_dir, config.store_url)
    finder = getattr(store, "shards", None)  # the shared store looks them up by index
    found = finder(run) if finder else store.list_comparisons()
    newest: dict[int, Comparison] = {}
    for c in sorted(found, key=lambda c: (c.created, c.id)):
        mark = shard_of(c)
        if mark is not None and mark.run == run:
            newest[mark.index] = c
    if not newest:
        raise UsageError(
            f"no stored shard of sharded run `{run}`",
            "check the id given to `--shard-run` (default: $GITHUB_RUN_ID, else `local`)",
        )
    return [newest[i] for i in sorted(newest)]


def merge_inputs(config: Config, inputs: Sequence[str], shard_run: str | None = None) -> Comparison:
    """Merge the shards named by ``inputs`` (and/or stored under ``shard_run``); store it."""
    from perfctl.store.local import new_id, open_store, utcnow

    shards = load_inputs(config, inputs)
    if shard_run is not None:
        shards += stored_shards(config, shard_run)
    merged = merge(shards, new_id(), utcnow())
    open_store(config.state_dir, config.store_url).save_comparison(merged)
    return merged
