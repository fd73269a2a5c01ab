"""Where the instructions moved between two refs: a function table and a flame graph.

Both sides are :class:`perfctl.profile.callgrind.Graph` of the steady-state loop
per op, so the figures are instructions per operation and compare directly.
The table ranks functions by the change of their *self* instructions per op,
which callgrind counts exactly; the inclusive figures and the differential flame
graph come from stacks rebuilt out of call edges (see
:func:`perfctl.profile.callgrind.to_stacks`), an estimate where a function has
several callers. Artefacts of one regime's diff::

    <reports>/instructions/<regime>/<base-run>-vs-<head-run>/
        diff.svg  diff-reverse.svg  functions.json

``functions.json``: :mod:`perfctl.profile.instruction_records`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from perfctl.profile import callgrind, stackdiff
from perfctl.profile.hotspots import call_tree, function_stats
from perfctl.profile.instruction_records import FunctionMove, InstructionsDiff, count, to_dict
from perfctl.profile.stacks import Stacks

BAND = 0.001  # colour a flame box only when its self count moved by 0.1% of the total
FILES = {"flame": "diff.svg", "reverse": "diff-reverse.svg", "functions": "functions.json"}


def both_stacks(before: callgrind.Graph, after: callgrind.Graph) -> tuple[Stacks, Stacks]:
    """Both sides' rebuilt stacks, small branches folded at one floor (so they fold alike)."""
    floor = callgrind.MIN_SHARE * max(before.total, after.total)
    return callgrind.to_stacks(before, floor), callgrind.to_stacks(after, floor)


def moves(
    before: callgrind.Graph,
    after: callgrind.Graph,
    stacks: tuple[Stacks, Stacks] | None = None,
    limit: int = 25,
) -> list[FunctionMove]:
    """The ``limit`` functions whose self instructions per op moved most.

    Self counts are callgrind's own (exact); inclusive ones come from the rebuilt stacks.
    """
    b_stacks, a_stacks = stacks or both_stacks(before, after)
    b_incl, a_incl = function_stats(b_stacks), function_stats(a_stacks)
    b_self, a_self = before.functions(), after.functions()
    out = []
    for f in set(b_self) | set(a_self):
        bs, as_ = b_self.get(f, 0.0), a_self.get(f, 0.0)
        bi = b_incl[f].inclusive_s if f in b_incl else 0.0
        ai = a_incl[f].inclusive_s if f in a_incl else 0.0
        out.append(FunctionMove(f.name, f.file, bs, as_, max(bi, bs), max(ai, as_)))
    out.sort(key=lambda m: (-abs(m.delta_self), m.function, m.object))
    return out[:limit]


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write_diff(
    before: callgrind.Graph, after: callgrind.Graph, folder: Path, meta: dict[str, str]
) -> InstructionsDiff:
    """Write the table and both differential flame graphs of ``meta['regime']`` into ``folder``."""
    b_stacks, a_stacks = both_stacks(before, after)
    d = InstructionsDiff(
        meta["regime"],
        meta["before_run"],
        meta["after_run"],
        before.total,
        after.total,
        tuple(moves(before, after, (b_stacks, a_stacks))),
    )
    root = stackdiff.pair(call_tree(b_stacks), call_tree(a_stacks), 1.0, 1.0)
    flame, reverse = stackdiff.diff_svgs(
        root,
        band=BAND * max(d.before_total, d.after_total),
        title=f"{d.regime}: instructions per op, {meta['before_label']} → {meta['after_label']}",
        before_per_op_s=d.before_total,
        after_per_op_s=d.after_total,
        fmt=lambda v: f"{count(v)} instr",
        what="self instructions per op",
        band_text="within 0.1% of the total",
    )
    folder.mkdir(parents=True, exist_ok=True)
    _write(folder / FILES["flame"], flame)
    _write(folder / FILES["reverse"], reverse)
    _write(folder / FILES["functions"], json.dumps(to_dict(d), indent=1) + "\n")
    return d
