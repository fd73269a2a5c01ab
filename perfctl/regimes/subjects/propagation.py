"""Reference propagation subject: a dependency graph of pages, deltas and recompute.

Modelled on seed 001 (MMSB). A page holds bytes and may derive from a parent page through a
passthrough recompute (its data is a copy of the parent's). Updating a page computes a delta
(the XOR of old and new bytes), routes it (allocate a delta id under a lock, apply it, log
it, bump the page's epoch when the bytes really changed) and propagates to the descendants
in topological order, each recomputing, diffing and routing its own delta.

``mode="recompute"`` recomputes every descendant on every propagation (the seed's baseline).
``mode="epoch"`` skips a page whose parent's epoch is unchanged since its last recompute
(the seed's Priority 1). That skip is valid only because recompute is a pure function of the
parent's bytes; the regimes check both modes produce identical pages before timing.

The ``propagation`` protocol: ``factory(mode)`` returns an engine with
``create_page(size, parent=None) -> int``, ``update_page(page_id, data)``,
``batch_update([(page_id, data), ...])`` (apply every delta, then propagate once),
``read_page(page_id) -> bytes``, ``snapshot() -> dict[int, tuple[bytes, int]]`` (data and
epoch of every page) and ``close()``.
"""

from __future__ import annotations

import heapq
import threading
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

MODES = ("recompute", "epoch")
# Deltas kept in the log: enough to replay recent history, bounded so long runs stay flat.
LOG_SIZE = 4096


@dataclass
class Page:
    """One page: its bytes, its parent, its epoch and the parent epoch it last recomputed from."""

    id: int
    data: bytes
    parent: int | None = None
    epoch: int = 0
    seen_epoch: int = -1


@dataclass(frozen=True)
class Delta:
    """A routed change: the XOR of old and new bytes as an integer (0: no change)."""

    id: int
    page: int
    xor: int
    epoch: int


@dataclass
class Stats:
    """Counters for tests and metrics."""

    recomputes: int = 0
    skips: int = 0
    deltas: int = 0


def diff(old: bytes, new: bytes) -> int:
    """The XOR of two equal-length byte strings, as an integer."""
    return int.from_bytes(old, "little") ^ int.from_bytes(new, "little")


@dataclass
class Engine:
    """Pages, deltas and passthrough propagation (the ``propagation`` protocol)."""

    mode: str = "recompute"
    pages: dict[int, Page] = field(default_factory=dict)
    children: dict[int, list[int]] = field(default_factory=dict)
    log: deque[Delta] = field(default_factory=lambda: deque(maxlen=LOG_SIZE))
    stats: Stats = field(default_factory=Stats)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"unknown mode {self.mode!r}; expected one of {MODES}")
        self._lock = threading.Lock()
        self._next_delta = 0

    def create_page(self, size: int, parent: int | None = None) -> int:
        """Allocate a page (zeroed, or derived from ``parent``) and return its id."""
        pid = len(self.pages)
        page = Page(pid, bytes(size), parent)
        if parent is not None:
            source = self.pages[parent]
            if len(source.data) != size:
                raise ValueError(f"page {pid}: passthrough needs the parent's size {size}")
            page.data, page.seen_epoch = source.data, source.epoch
            self.children[parent].append(pid)
        self.pages[pid] = page
        self.children[pid] = []
        return pid

    def read_page(self, page_id: int) -> bytes:
        """The page's current bytes."""
        return self.pages[page_id].data

    def update_page(self, page_id: int, data: bytes) -> None:
        """Write a page and propagate the change to its descendants."""
        self._route(self.pages[page_id], data)
        self._propagate([page_id])

    def batch_update(self, updates: Iterable[tuple[int, bytes]]) -> None:
        """Apply every delta in order, grouped by page, then propagate once."""
        grouped: dict[int, list[bytes]] = {}
        for page_id, data in updates:
            grouped.setdefault(page_id, []).append(data)
        for page_id, versions in grouped.items():
            page = self.pages[page_id]
            for data in versions:  # same-page deltas stay in order (seed 001, risk 4)
                self._route(page, data)
        self._propagate(list(grouped))

    def snapshot(self) -> dict[int, tuple[bytes, int]]:
        """Every page's bytes and epoch, for equality checks between modes."""
        return {pid: (p.data, p.epoch) for pid, p in self.pages.items()}

    def close(self) -> None:
        """Drop all pages and the log."""
        self.pages.clear()
        self.children.clear()
        self.log.clear()

    def _route(self, page: Page, data: bytes) -> None:
        if len(data) != len(page.data):
            raise ValueError(f"page {page.id}: {len(data)} bytes for a {len(page.data)}-byte page")
        xor = diff(page.data, data)
        with self._lock:  # delta ids are global, as in the seed
            self._next_delta += 1
            delta_id = self._next_delta
        if xor:
            page.epoch += 1
            applied = int.from_bytes(page.data, "little") ^ xor
            page.data = applied.to_bytes(len(data), "little")
        self.log.append(Delta(delta_id, page.id, xor, page.epoch))
        self.stats.deltas += 1

    def _propagate(self, roots: Sequence[int]) -> None:
        # Page ids grow in creation order and parents exist first: a heap of ids is a
        # topological order.
        heap = sorted({c for r in roots for c in self.children[r]})
        queued = set(heap)
        while heap:
            page = self.pages[heapq.heappop(heap)]
            if not self._recompute(page):
                continue
            for child in self.children[page.id]:
                if child not in queued:
                    queued.add(child)
                    heapq.heappush(heap, child)

    def _recompute(self, page: Page) -> bool:
        assert page.parent is not None
        parent = self.pages[page.parent]
        if self.mode == "epoch" and parent.epoch == page.seen_epoch:
            self.stats.skips += 1
            return False
        self.stats.recomputes += 1
        self._route(page, parent.data)  # passthrough: the page becomes its parent's bytes
        page.seen_epoch = parent.epoch
        return True
