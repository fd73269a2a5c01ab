"""`perfctl compare --from-store`: re-decide a stored comparison without measuring.

A verdict needs both sides measured together (interleaved, same load, same regime
set), so a recomputation starts from a stored *comparison*, never from two runs
picked separately: by default the newest measured comparison of exactly the two
commits, or the one ``--comparison ID`` names. It re-applies the statistics (with
this invocation's threshold, alpha and regime selection) to the raw values of that
comparison's runs and keeps its warnings, load averages and machines; the result is
stored with ``recomputed_from`` set. Pairing runs from different comparisons is
refused unless ``--mix-runs`` asks for it, and then every output carries a warning.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from perfctl.caveats import Caveat, WarningKind, kind_of
from perfctl.errors import StoreError, UsageError
from perfctl.measure.interleave import SIDES
from perfctl.model import Comparison, RefInfo, RegimeComparison, RegimeResult, Run
from perfctl.regimes import discovery
from perfctl.render.escape import shell_command
from perfctl.store.local import Store, new_id, open_store, utcnow

if TYPE_CHECKING:
    from perfctl.config import Config
    from perfctl.jobs.compare import CompareSettings

Pairs = dict[str, dict[str, RegimeResult]]


def compare_from_store(
    config: Config,
    base: str,
    head: str,
    settings: CompareSettings | None = None,
    *,
    comparison: str | None = None,
    mix_runs: bool = False,
) -> Comparison:
    """Re-decide a stored comparison of BASE and HEAD (measures nothing); store it."""
    from perfctl.jobs.compare import COMPARE_DEFAULT

    settings = settings or COMPARE_DEFAULT
    if comparison and mix_runs:
        raise UsageError(
            "--comparison and --mix-runs exclude each other",
            "--comparison recomputes one measured comparison; leave --mix-runs out",
        )
    store = open_store(config.state_dir, config.store_url)
    refs = _resolve(config, base, head)
    source = _pick(store, refs, comparison)
    if source is not None:
        c = _recompute(config, store, source, refs, settings)
    elif mix_runs and not _same(refs):
        c = _mix_runs(config, store, refs, settings)
    else:
        raise _no_comparison(store, refs, mix_runs)
    store.save_comparison(c)
    return c


def _resolve(config: Config, base: str, head: str) -> dict[str, RefInfo]:
    from perfctl.git import refs as gitrefs

    return {
        s: gitrefs.resolve_ref(config.root, r, outputs=config.outputs)
        for s, r in zip(SIDES, (base, head), strict=True)
    }


def _same(refs: dict[str, RefInfo]) -> bool:
    b, h = refs["base"], refs["head"]
    return (b.sha, b.dirty) == (h.sha, h.dirty)


def _key(ref: RefInfo) -> tuple[str, bool]:
    return (ref.sha, ref.dirty)


def _orientation(c: Comparison, refs: dict[str, RefInfo]) -> bool | None:
    """Whether a comparison measured these two commits: as asked (False), swapped (True)."""
    asked = (_key(refs["base"]), _key(refs["head"]))
    if (_key(c.base), _key(c.head)) == asked:
        return False
    if (_key(c.head), _key(c.base)) == asked:
        return True
    return None


def _pick(store: Store, refs: dict[str, RefInfo], cid: str | None) -> Comparison | None:
    """The comparison to recompute: the one named, else the newest measured one."""
    if cid is None:
        found = store.comparisons_of(refs["base"].sha, refs["head"].sha)
        return next((c for c in found if c.measured and _orientation(c, refs) is not None), None)
    c = store.load_comparison(cid)
    if _orientation(c, refs) is None:
        raise UsageError(
            f"comparison {c.id} compares {c.base.ref} ({c.base.short}) → "
            f"{c.head.ref} ({c.head.short}), not {refs['base'].ref} → {refs['head'].ref}",
            f"pass its refs: `{shell_command('perfctl', 'compare', c.base.sha[:10], c.head.sha[:10], '--from-store', '--comparison', c.id)}`",
        )
    if not c.measured and not c.recomputed_from:
        raise UsageError(
            f"comparison {c.id} was recomputed by an older perfctl from runs that may "
            "not have been measured together",
            "pass the id of a measured comparison (see `perfctl comparisons`)",
        )
    return c


def _recompute(
    config: Config,
    store: Store,
    source: Comparison,
    refs: dict[str, RefInfo],
    settings: CompareSettings,
) -> Comparison:
    """Re-decide the raw values of a measured comparison's own runs (sides as asked)."""
    swapped = bool(_orientation(source, refs))
    settings = _as_measured(settings, source)
    runs = {s: _load(store, source, s) for s in SIDES}
    if swapped:  # measured head → base: the same interleaved runs, read the other way
        runs = {"base": runs["head"], "head": runs["base"]}
    pairs = _pairs(runs["base"], runs["head"], [r.name for r in source.regimes], settings)
    stored = source.settings
    # How the values were measured decides how they are analysed, whatever this call says.
    seed = int(stored.get("seed", 0) or 0)
    pairing = str(stored.get("pairing") or "process")
    old = () if swapped else source.regimes  # profile links are per side
    return replace(
        source,
        id=new_id(),
        created=utcnow(),
        base=refs["base"],  # the refs asked for, not the names they were measured under
        head=refs["head"],
        machine=runs["base"].machine if swapped else source.machine,
        head_machine=runs["head"].machine if swapped else source.head_machine,
        regimes=_decide(pairs, settings, seed, old, pairing=pairing),
        threshold=settings.threshold,
        alpha=settings.alpha,
        commits=_commits(config, refs) if swapped else source.commits,
        base_run=runs["base"].id,
        head_run=runs["head"].id,
        settings={**stored, "from_store": True},
        recomputed_from=source.recomputed_from or source.id,
    )


def _as_measured(settings: CompareSettings, source: Comparison) -> CompareSettings:
    """A counter comparison keeps its own band unless this call names one.

    ``compare A B --from-store`` parses as a wall-time call (1% band); re-deciding
    instruction counts with it would hide a +0.8% change that their 0.5% band calls.
    ``--threshold`` (or ``--measure``, whose band it is) still wins.
    """
    measure = str(source.settings.get("measure") or "time")
    if measure == "time" or settings.schedule.measure != "time" or settings.threshold_given:
        return settings
    schedule = replace(settings.schedule, threshold=source.threshold, measure=measure)
    return replace(settings, schedule=schedule)


def _commits(config: Config, refs: dict[str, RefInfo]) -> tuple[RefInfo, ...]:
    from perfctl.git import refs as gitrefs

    return gitrefs.commits_between(config.root, refs["base"].sha, refs["head"].sha)


def _load(store: Store, source: Comparison, side: str) -> Run:
    run_id = source.base_run if side == "base" else source.head_run
    try:
        return store.load_run(run_id)
    except StoreError as exc:
        raise StoreError(
            f"comparison {source.id}: its {side} run `{run_id}` cannot be read ({exc.message})",
            "measure the refs again with `perfctl compare`",
        ) from None


def _pairs(b_run: Run, h_run: Run, names: list[str] | None, settings: CompareSettings) -> Pairs:
    """Both sides' results per regime, selected by --regime/--family as compare selects."""
    b_res = {r.name: r for r in b_run.results}
    h_res = {r.name: r for r in h_run.results}
    wanted = names if names is not None else list(b_res)
    both = [b_res[n] for n in wanted if n in b_res and n in h_res]
    chosen = discovery.select(both, settings.globs, settings.family)
    return {r.name: {"base": b_res[r.name], "head": h_res[r.name]} for r in chosen}


def _decide(
    pairs: Pairs,
    settings: CompareSettings,
    seed: int,
    old: tuple[RegimeComparison, ...] = (),
    *,
    pairing: str = "process",
) -> tuple[RegimeComparison, ...]:
    from perfctl.stats import verdicts

    rows = verdicts.decide_all(
        pairs, threshold=settings.threshold, alpha=settings.alpha, seed=seed, pairing=pairing
    )
    linked = {r.name: r.artifacts for r in old if r.artifacts}  # keep profile links
    return tuple(replace(r, artifacts=linked.get(r.name, r.artifacts)) for r in rows)


# --- --mix-runs: runs from different comparisons, warned -------------------------------------


def _latest_run(store: Store, ref: RefInfo) -> Run:
    for run in store.list_runs():  # newest first
        if (
            (run.ref.sha, run.ref.dirty) == (ref.sha, ref.dirty)
            and run.results
            and run.status in ("complete", "failed")
        ):
            return run
    raise StoreError(
        f"no stored run of {ref.ref} ({ref.short})",
        f"measure it with `{shell_command('perfctl', 'compare', ref.ref)} ...` first",
    )


def _origin(store: Store, run: Run) -> Comparison | None:
    """The measured comparison a run belongs to, if any."""
    found = store.comparisons_of(run.ref.sha)
    return next((c for c in found if c.measured and run.id in (c.base_run, c.head_run)), None)


def _mix_runs(
    config: Config, store: Store, refs: dict[str, RefInfo], settings: CompareSettings
) -> Comparison:
    """Pair the newest run of each commit (asked for with --mix-runs), with warnings."""
    runs = {s: _latest_run(store, refs[s]) for s in SIDES}
    origins = {s: _origin(store, runs[s]) for s in SIDES}
    # Measured apart: never paired process by process, however each run was measured;
    # and no one measuring time of both (each run's is its own comparison's).
    pairs = {
        name: {s: replace(r, pairing="process", seconds=0.0) for s, r in sides.items()}
        for name, sides in _pairs(runs["base"], runs["head"], None, settings).items()
    }
    b_run, h_run = runs["base"], runs["head"]
    return Comparison(
        id=new_id(),
        created=utcnow(),
        base=refs["base"],
        head=refs["head"],
        machine=b_run.machine,
        head_machine=h_run.machine,
        regimes=_decide(pairs, settings, settings.schedule.seed),
        threshold=settings.threshold,
        alpha=settings.alpha,
        warnings=_mixed_warnings(runs, origins),
        commits=_commits(config, refs),
        base_run=b_run.id,
        head_run=h_run.id,
        settings=_mixed_settings(runs, origins, settings),
        recomputed_from="+".join(c.id if c else "" for c in origins.values()).strip("+"),
    )


def _mixed_warnings(
    runs: dict[str, Run], origins: dict[str, Comparison | None]
) -> tuple[Caveat, ...]:
    def where(side: str) -> str:
        c = origins[side]
        return f"comparison {c.id}" if c else f"run {runs[side].id}, started {runs[side].started}"

    out = [
        Caveat(
            f"runs measured apart (--mix-runs): base and head were not measured together (base "
            f"from {where('base')}, head from {where('head')}); a difference may be the other "
            "session's load, machine state or regime set rather than the code",
            WarningKind.MEASURED_APART,
        )
    ]
    if runs["base"].machine.id != runs["head"].machine.id:
        out.append(
            Caveat(
                f"base and head were measured on different machines ({runs['base'].machine.id} "
                f"vs {runs['head'].machine.id}): differences may be the machine's",
                WarningKind.MACHINES_DIFFER,
            )
        )
    placed = {side: _placement(runs[side], origins[side]) for side in SIDES}
    if placed["base"] != placed["head"]:
        from perfctl.measure.machine import format_cpus

        shown = {s: format_cpus(cpus) if cpus else "not pinned" for s, cpus in placed.items()}
        out.append(
            Caveat(
                f"base and head workers were placed differently (--affinity: base "
                f"{shown['base']}, head {shown['head']}): differences may be where they ran",
                WarningKind.PLACEMENT_DIFFERS,
            )
        )
    for side in SIDES:
        c = origins[side]
        if c is not None:  # that session's own warnings (busy machine, ...) still hold
            out += [
                Caveat(f"{side} side, from comparison {c.id}: {w}", kind_of(w)) for w in c.warnings
            ]
    return tuple(dict.fromkeys(out))


def _placement(run: Run, origin: Comparison | None) -> tuple[int, ...]:
    """The CPUs a side's workers were pinned to: its comparison's, else its run's."""
    return tuple((origin.settings if origin else run.settings).get("affinity") or ())


def _mixed_settings(
    runs: dict[str, Run], origins: dict[str, Comparison | None], settings: CompareSettings
) -> dict[str, Any]:
    from perfctl.measure.machine import common_cpus

    loads = [x for c in origins.values() if c for x in c.settings.get("load_average") or ()]
    placed = common_cpus(_placement(runs[side], origins[side]) for side in SIDES)
    return {
        "from_store": True,
        "mix_runs": True,
        "preset": settings.name,
        "load_average": [min(loads), max(loads)] if loads else None,
        # Pinned alike: say so (a difference is a warning instead).
        "affinity": list(placed),
    }


def _no_comparison(store: Store, refs: dict[str, RefInfo], mix_runs: bool) -> UsageError:
    """The refusal: which comparisons exist for these commits, and what to run."""
    b, h = refs["base"], refs["head"]
    if _same(refs):
        return UsageError(
            f"base and head are the same commit ({b.ref} = {h.ref} = {b.short}) and no "
            "comparison of it with itself is stored: a run compared with itself proves nothing",
            "to see this commit's noise, measure it against itself: "
            f"`{shell_command('perfctl', 'compare', b.ref, h.ref)}` (an A/A comparison); "
            "otherwise give two different commits",
        )
    found = [c for c in store.comparisons_of(b.sha, h.sha) if c.measured]
    listed = "; ".join(
        f"{c.id} ({c.base.ref} {c.base.short} → {c.head.ref} {c.head.short})" for c in found[:5]
    )
    more = f" and {len(found) - 5} more" if len(found) > 5 else ""
    exist = f"comparisons with these commits: {listed}{more}. " if found else ""
    return UsageError(
        f"no stored comparison measured {b.ref} ({b.short}) against {h.ref} ({h.short})",
        f"{exist}Measure them together with `{shell_command('perfctl', 'compare', b.ref, h.ref)}`"
        + ("" if mix_runs else ", or pass --mix-runs to pair runs measured apart (warned)"),
    )
