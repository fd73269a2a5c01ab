"""propagation: a dependency graph of pages, deltas and passthrough recompute (seed 001).

Subject: ``propagation`` -> ``perfctl.regimes.subjects.propagation:Engine`` (``factory(mode)`` with
create_page/update_page/batch_update/read_page/snapshot/close). Each update regime runs in
``mode=recompute`` (every descendant recomputed on every propagation) and ``mode=epoch``
(descendants of unchanged parents skipped). Every run writes one real change and one
republish of unchanged bytes (batches: half the pages republish), which is where the epoch
skip pays. Before timing, setup replays the workload in both modes on fresh engines and
raises unless every page's bytes and epoch are identical, so the fast path can never get
faster by computing something different. Loaded by path: imports only the stdlib and perfctl.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from perfctl import regime, subject

Run = Callable[[], object]
Metrics = Callable[[], dict[str, float]]

MODES = ["recompute", "epoch"]
PAGE_BYTES = 1024
ALLOCATIONS = 64  # pages allocated per run()
CHAIN_DEPTH = 32
FAN_WIDTH = 32
BATCHES = {"32x4": (32, 4), "128x2": (128, 2)}  # pages x deltas per page (seed 001's table)
CHECK_ROUNDS = 6  # workload steps replayed in both modes before timing


def _engine(mode: str) -> Any:
    return subject("propagation", default="perfctl.regimes.subjects.propagation:Engine")(mode=mode)


def version(flip: int, index: int = 0) -> bytes:
    """One of two distinct contents for a page (``flip`` 0 or 1), varied by page index."""
    stem = bytes((index + flip * 7 + i) % 256 for i in range(64))
    return stem * (PAGE_BYTES // len(stem))


class Workload:
    """A graph built on one engine and the updates one run() applies to it (precomputed)."""

    def __init__(self, engine: Any, shape: str, batch: str | None = None) -> None:
        self.engine, self.shape, self.flip = engine, shape, 0
        self.deltas = 1
        if shape == "batch":
            pages, self.deltas = BATCHES[batch or "32x4"]
            self.roots = [self._chain(1) for _ in range(pages)]
        else:
            self.roots = [self._chain(CHAIN_DEPTH if shape == "chain" else 0)]
            for _ in range(FAN_WIDTH if shape == "fan" else 0):
                engine.create_page(PAGE_BYTES, parent=self.roots[0])
        # Built once, so the timed step does nothing but update and propagate.
        self.versions = (version(0), version(1))
        self.batches = (self._batch(0), self._batch(1))

    def _chain(self, depth: int) -> int:
        root = prev = self.engine.create_page(PAGE_BYTES)
        for _ in range(depth):
            prev = self.engine.create_page(PAGE_BYTES, parent=prev)
        return int(root)

    def _batch(self, flip: int) -> list[tuple[int, bytes]]:
        updates = []
        for i, root in enumerate(self.roots):
            if i % 2:  # odd pages republish their current (initial, zero) bytes
                updates += [(root, bytes(PAGE_BYTES))] * self.deltas
                continue
            # Even pages step through versions and end on this run's flip.
            for j in range(self.deltas):
                updates.append((root, version(flip ^ ((self.deltas - 1 - j) & 1), i)))
        return updates

    def step(self) -> None:
        """One run: a real change then a republish (or one mixed batch)."""
        self.flip ^= 1
        if self.shape == "batch":
            self.engine.batch_update(self.batches[self.flip])
            return
        data = self.versions[self.flip]
        self.engine.update_page(self.roots[0], data)
        self.engine.update_page(self.roots[0], data)  # unchanged bytes: a republish

    @property
    def ops(self) -> int:
        """Updates (deltas) applied per step."""
        return 2 if self.shape != "batch" else len(self.roots) * self.deltas


def check_modes_agree(shape: str, batch: str | None = None) -> None:
    """Replay the workload in both modes; raise unless every page ends identical."""
    snapshots = []
    for mode in MODES:
        engine = _engine(mode)
        try:
            work = Workload(engine, shape, batch)
            for _ in range(CHECK_ROUNDS):
                work.step()
            snapshots.append(engine.snapshot())
        finally:
            engine.close()
    recompute, epoch = snapshots
    bad = sorted(p for p in set(recompute) | set(epoch) if recompute.get(p) != epoch.get(p))
    if bad:
        raise RuntimeError(
            f"propagation subject: epoch mode computed different pages than recompute mode "
            f"for the {shape} workload (pages {bad[:5]}); the epoch skip is unsound here"
        )


def _timed(mode: str, shape: str, batch: str | None = None) -> Iterator[tuple[Run, Metrics]]:
    check_modes_agree(shape, batch)
    engine = _engine(mode)
    try:
        work = Workload(engine, shape, batch)
        steps = [0]

        def run() -> None:
            work.step()
            steps[0] += 1

        def metrics() -> dict[str, float]:
            stats = getattr(engine, "stats", None)  # optional: the reference engine counts
            if stats is None or not steps[0]:
                return {}
            return {"recomputes_per_op": stats.recomputes / (steps[0] * work.ops)}

        yield run, metrics
    finally:
        engine.close()


@regime(name="propagation.allocate", family="propagation", ops=ALLOCATIONS, tags=("seed-001",))
def allocate() -> Iterator[Run]:
    """Start an engine, allocate 64 one-KiB pages, stop it (mode plays no part here)."""

    def run() -> None:
        engine = _engine("recompute")
        try:
            for _ in range(ALLOCATIONS):
                engine.create_page(PAGE_BYTES)
        finally:
            engine.close()

    yield run


@regime(
    name="propagation.update_chain",
    family="propagation",
    ops=2,
    params={"mode": MODES},
    metrics=("recomputes_per_op",),
    tags=("seed-001",),
)
def update_chain(mode: str) -> Iterator[tuple[Run, Metrics]]:
    """Update the root of a 32-page passthrough chain and propagate to its end."""
    yield from _timed(mode, "chain")


@regime(
    name="propagation.update_fan",
    family="propagation",
    ops=2,
    params={"mode": MODES},
    metrics=("recomputes_per_op",),
    tags=("seed-001",),
)
def update_fan(mode: str) -> Iterator[tuple[Run, Metrics]]:
    """Update a root page with 32 passthrough children and propagate to all of them."""
    yield from _timed(mode, "fan")


@regime(
    name="propagation.batch_32x4",
    family="propagation",
    ops=32 * 4,
    params={"mode": MODES},
    metrics=("recomputes_per_op",),
    tags=("seed-001",),
)
def batch_32x4(mode: str) -> Iterator[tuple[Run, Metrics]]:
    """Route 4 deltas to each of 32 pages, then propagate once to their children."""
    yield from _timed(mode, "batch", "32x4")


@regime(
    name="propagation.batch_128x2",
    family="propagation",
    ops=128 * 2,
    params={"mode": MODES},
    metrics=("recomputes_per_op",),
    tags=("seed-001",),
)
def batch_128x2(mode: str) -> Iterator[tuple[Run, Metrics]]:
    """Route 2 deltas to each of 128 pages, then propagate once to their children."""
    yield from _timed(mode, "batch", "128x2")
