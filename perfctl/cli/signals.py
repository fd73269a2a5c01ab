"""`compare --measure time,instructions,memory`: several signals, one verdict each."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from perfctl.cli.common import Format, emit, err_console, out_console
from perfctl.cli.measure import Measure
from perfctl.cli.show import exit_code, progress_line, show_comparison
from perfctl.errors import UsageError
from perfctl.model import Comparison

MeasuresOpt = Annotated[
    str,
    typer.Option(
        "--measure",
        help="time (pyperf wall time); instructions: callgrind instructions/op of the "
        "timed loop (needs valgrind); memory: tracemalloc blocks/bytes per op and peaks. "
        "Several, comma-separated (time,instructions): one verdict per signal, each "
        "measured in its own processes.",
    ),
]


def parse_measures(text: str, flag: str = "--measure") -> tuple[Measure, ...]:
    """``time,instructions`` -> (Measure.time, Measure.instructions): known, each once."""
    asked = [p.strip() for p in text.split(",") if p.strip()]
    known = {m.value: m for m in Measure}
    unknown = [p for p in asked if p not in known]
    if unknown or not asked:
        raise UsageError(
            f"{flag} takes {', '.join(known)} or several of them, comma-separated (got {text!r})",
            f"for example {flag} time or {flag} time,instructions"
            if flag == "--measure"
            else f"for example {flag} instructions or {flag} instructions,memory",
        )
    return tuple(known[p] for p in dict.fromkeys(asked))


def check_signals(
    *, from_store: bool, shard: str | None, profile: bool, comparison: bool, mix_runs: bool
) -> None:
    """Flags that take one signal at a time."""
    given = (
        ("--from-store", from_store),
        ("--comparison", comparison),
        ("--mix-runs", mix_runs),
        ("--shard", shard),
        ("--profile", profile),
    )
    for flag, on in given:
        if on:
            raise UsageError(
                f"{flag} takes one signal at a time (--measure names several)",
                f"run it once per signal, e.g. --measure time {flag}",
            )


def compare_signals(
    config: Any,
    base: str,
    head: str,
    every: list[Any],
    fmt: Format,
    fail_on_regression: bool,
) -> None:
    """Measure each signal in its own comparison, show them side by side, then gate."""
    from perfctl.jobs import signals

    err = err_console()
    with err.status("comparing") as status:
        cs = signals.compare_signals(
            config, base, head, every, progress=lambda m: progress_line(err, status, m)
        )
    show_signals(cs, fmt)
    signals_exit_code(cs, fail_on_regression)


def show_signals(cs: tuple[Comparison, ...], fmt: Format) -> None:
    """Each signal's own output, then the signals side by side and who flags what."""
    from perfctl.render import signals as render
    from perfctl.render.tables import esc, format_compare_markdown, md_escape
    from perfctl.stats.signals import measure_of, notes, side_by_side

    if fmt == Format.json:
        emit(render.signals_json(cs))
        return
    if fmt == Format.markdown:
        parts = [f"### {md_escape(measure_of(c))}\n\n{format_compare_markdown(c)}" for c in cs]
        emit("\n".join([*parts, "### signals side by side\n", render.signals_markdown(cs)]))
        return
    console = out_console()
    for c in cs:
        console.print(f"[bold]signal: {measure_of(c)}[/bold]")
        show_comparison(c, fmt)
    console.print(render.signals_table(cs))
    for line in notes(side_by_side(cs)):
        console.print(esc(line))


def signals_exit_code(cs: tuple[Comparison, ...], fail_on_regression: bool) -> None:
    """3 when a regime failed in any signal; 1 when gating and any signal regressed."""
    for c in cs:
        exit_code(c, False)  # failures first, whichever signal they are in
    for c in cs:
        exit_code(c, fail_on_regression)
