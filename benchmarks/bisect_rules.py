"""Simulated bisections: how often each judging rule names the right commit.

A bisection of the issue's 64-commit line (one commit +8%, two that do not build) is
played many times against simulated processes whose noise matches what the real
runs under one CPU-bound competitor showed (benchmarks/README.md, bisect section:
a CI of about ±7% after 56 rounds). Everything but the processes is perfctl's own
code: the Hodges-Lehmann change and Moses CI, the verdict, the sequential stopping
rule, the search with its skips and second looks, the verification and the judging
rule. Two rules are played on the same seeds:

* ``halfway``: the rule before this script (the CI wholly beyond half the slowdown,
  the slowdown as the first confirm said);
* ``odds``: :func:`perfctl.stats.bisection.classify`, with the ends measured again
  until :attr:`Slowdown.precise` and the second look's lower odds: the rule now.

It is a model, not a measurement: the real runs in ``bisect_accuracy.py`` decide.

    python benchmarks/bisect_rules.py --runs 200
"""

from __future__ import annotations

import argparse
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

import numpy as np

from perfctl.jobs.bisect_pairs import confirm_judge, precise_judge
from perfctl.model import FAILED, REGRESSED, RegimeComparison, Verdict
from perfctl.stats import bisection as rules
from perfctl.stats import decision
from perfctl.stats.bisection import Likeness, Slowdown

G, B, U, S = Likeness.GOOD, Likeness.BAD, Likeness.UNKNOWN, Likeness.SKIPPED
BAND = 0.02  # the band its figures were measured at (compare's default before 2026-11)


@dataclass
class Noise:
    """Per-process log-mean noise: a normal core and a slow tail (busy spells)."""

    sigma: float = 0.12
    tail: float = 0.2  # the share of processes hit by a busy spell
    tail_sigma: float = 0.3
    drift: float = 0.01  # per-comparison bias ABBA does not cancel

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` processes' log-mean offsets."""
        core = rng.normal(0.0, self.sigma, n)
        hit = rng.random(n) < self.tail
        return core + hit * np.abs(rng.normal(0.0, self.tail_sigma, n))


@dataclass
class Line:
    """The commits: 0 = GOOD .. n = BAD, the culprit, the unbuildable ones."""

    n: int
    culprit: int
    slowdown: float
    broken: frozenset[int]
    # Small changes of other commits (an unrelated +1%), summed along the line.
    offsets: tuple[float, ...] = ()

    def mean(self, i: int) -> float:
        """Commit i's true log mean."""
        own = self.offsets[i] if self.offsets else 0.0
        return own + (math.log1p(self.slowdown) if i >= self.culprit else 0.0)


@dataclass
class Sim:
    """One simulated bisection: the pairs measured so far and what they cost."""

    line: Line
    noise: Noise
    rng: np.random.Generator
    rounds: int = 25  # per comparison: what the 60 s time budget allowed under load
    pairs: dict[tuple[str, int, int], list[tuple[np.ndarray, np.ndarray]]] = field(
        default_factory=dict
    )
    measured: set[int] = field(default_factory=set)
    total_rounds: int = 0

    def attempt(self, base: int, head: int, max_rounds: int) -> tuple[np.ndarray, np.ndarray]:
        """One interleaved comparison with compare's sequential stopping rule."""
        bias = self.rng.normal(0.0, self.noise.drift)
        b = self.line.mean(base) + self.noise.draw(self.rng, max_rounds)
        h = self.line.mean(head) + bias + self.noise.draw(self.rng, max_rounds)
        n = 10
        while n < max_rounds:
            c = decision.compare_sides(_procs(b[:n]), _procs(h[:n]))
            if decision.is_clear(c, threshold=BAND, alpha=0.05):
                break
            n += 1
        self.total_rounds += n
        return b[:n], h[:n]

    def step(
        self,
        kind: str,
        base: int,
        head: int,
        judge: Callable[[RegimeComparison], Likeness],
        limit: int,
        max_rounds: int,
    ) -> tuple[Likeness, RegimeComparison]:
        """Pairs.step: pool comparisons while the judge says unknown, up to ``limit``."""
        if head in self.line.broken:
            return S, _row(np.zeros(3), np.zeros(3), failed=True)
        if kind == "step":
            self.measured.add(head)
        got = self.pairs.setdefault((kind, base, head), [])
        while not got or (judge(pooled(got)) == U and len(got) < limit):
            got.append(self.attempt(base, head, max_rounds))
        row = pooled(got)
        return judge(row), row


def pooled(got: list[tuple[np.ndarray, np.ndarray]]) -> RegimeComparison:
    """Every comparison's processes as one sample, judged as compare judges."""
    return _row(np.concatenate([g[0] for g in got]), np.concatenate([g[1] for g in got]))


def _procs(logs: np.ndarray) -> list[tuple[float, ...]]:
    return [(float(v),) for v in np.exp(logs)]


def _row(b: np.ndarray, h: np.ndarray, failed: bool = False) -> RegimeComparison:
    if failed:
        return RegimeComparison(name="target", family="f", verdict=FAILED)
    c = decision.compare_sides(_procs(b), _procs(h))
    cv = lambda x: float(np.std(np.exp(x)) / np.mean(np.exp(x)))  # noqa: E731
    verdict, _ = decision.decide(
        c, c.p_value, threshold=BAND, alpha=0.05, base_cv=cv(b), head_cv=cv(h)
    )
    return RegimeComparison(
        name="target",
        family="f",
        verdict=verdict,
        change=c.change,
        ci_low=c.ci_low,
        ci_high=c.ci_high,
    )


def halfway_rule(total: Slowdown, _second: bool) -> Callable[[RegimeComparison], Likeness]:
    """The rule before: the CI wholly beyond half the confirm's point estimate."""
    mid = rules.halfway(total.change)

    def judge(row: RegimeComparison) -> Likeness:
        if row.verdict == FAILED:
            return S
        assert row.ci_low is not None and row.ci_high is not None
        return G if row.ci_high < mid else B if row.ci_low > mid else U

    return judge


def odds_rule(total: Slowdown, second: bool) -> Callable[[RegimeComparison], Likeness]:
    """perfctl's rule now (a second look settles for lower odds)."""
    odds = rules.SECOND_LOOK_ODDS if second else rules.ODDS
    return lambda row: rules.classify(row, total, odds)


def old_confirm(row: RegimeComparison) -> Likeness:
    """The confirm before the odds rule: a regression, or measured again while unclear."""
    if row.verdict == REGRESSED:
        return B
    return G if row.verdict in (Verdict.NO_CHANGE, Verdict.IMPROVED) else U


def bisect_once(sim: Sim, rule: str, attempts: int = 3) -> tuple[str, int, int]:
    """One bisection, as perfctl.jobs.bisect runs it; (outcome, measured steps, rounds)."""
    n = sim.line.n
    new = rule == "odds"
    first = partial(confirm_judge, band=BAND)
    found, row = sim.step("confirm", 0, n, first if new else old_confirm, attempts, sim.rounds)
    if new and (found == U or (found == B and not _slowdown(row).precise)):
        sharp = partial(precise_judge, band=BAND)
        _, row = sim.step("confirm", 0, n, sharp, attempts * 2, sim.rounds)
    if row.verdict != REGRESSED:
        return "not bisected", 0, sim.total_rounds
    total = _slowdown(row)
    make = odds_rule if new else halfway_rule
    judge = make(total, False)

    def judge_commit(i: int, limit: int = attempts) -> Likeness:
        look = make(total, limit > attempts)
        return sim.step("step", 0, i, look, limit, sim.rounds)[0]

    lo, hi, judged = rules.search(n, judge_commit)
    looked: set[int] = set()
    while (i := rules.unclear(lo, hi, judged, looked)) is not None:
        looked.add(i)
        judged[i] = judge_commit(i, attempts * 2)
        lo, hi = rules.narrowed(lo, hi, i, judged[i])
        lo, hi, judged = rules.search(n, judge_commit, (lo, hi, judged))

    def verify(r: RegimeComparison) -> Likeness:
        ok = r.verdict == REGRESSED and judge(r) == B
        return B if ok else (U if judge(r) == B else judge(r))

    holds = sim.step("verify", lo, hi, verify, attempts, sim.rounds * 2)[0] == B
    if not holds:
        lo, hi = rules.widen(lo, hi, judged, n)
    c = sim.line.culprit
    steps = len(sim.measured)
    if holds and hi - lo == 1:
        return ("right" if hi == c else "WRONG"), steps, sim.total_rounds
    inside = lo < c <= hi
    return ("range holding it" if inside else "WRONG range"), steps, sim.total_rounds


def _slowdown(row: RegimeComparison) -> Slowdown:
    assert row.change is not None and row.ci_low is not None and row.ci_high is not None
    return Slowdown(row.change, row.ci_low, row.ci_high, band=BAND)


def main() -> None:
    """Play both rules on the same seeds and print their tallies."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--commits", type=int, default=64)
    ap.add_argument("--slowdown", type=float, default=0.08)
    ap.add_argument("--rounds", type=int, default=25, help="rounds per comparison")
    ap.add_argument("--sigma", type=float, default=Noise.sigma)
    ap.add_argument("--tail", type=float, default=Noise.tail)
    ap.add_argument(
        "--jitter",
        type=float,
        default=0.0,
        help="one commit in five also changes the regime by N(0, this) on a log scale",
    )
    ap.add_argument("--calibrate", action="store_true", help="print the CI at 56 rounds")
    args = ap.parse_args()
    noise = Noise(sigma=args.sigma, tail=args.tail)
    if args.calibrate:
        rng = np.random.default_rng(0)
        rows = [_slowdown(_row(noise.draw(rng, 56), noise.draw(rng, 56))) for _ in range(200)]
        widths = [(r.ci_high - r.ci_low) / 2 for r in rows]
        print(f"CI half-width at 56 rounds, median: {np.median(widths):+.1%}")
        return
    for rule in ("halfway", "odds"):
        tally: dict[str, int] = {}
        steps, rounds = [], []
        for seed in range(args.runs):
            pick = random.Random(seed)
            culprit = pick.randint(1, args.commits)
            broken = frozenset(pick.sample([i for i in range(1, args.commits) if i != culprit], 2))
            moves = [
                pick.gauss(0.0, args.jitter) if pick.random() < 0.2 else 0.0
                for _ in range(args.commits + 1)
            ]
            moves[0] = 0.0
            offsets = tuple(float(v) for v in np.cumsum(moves))
            line = Line(args.commits, culprit, args.slowdown, broken, offsets)
            sim = Sim(line, noise, np.random.default_rng(seed), rounds=args.rounds)
            outcome, k, r = bisect_once(sim, rule)
            tally[outcome] = tally.get(outcome, 0) + 1
            steps.append(k)
            rounds.append(r)
        print(
            f"{rule:8} {dict(sorted(tally.items()))}  steps median {np.median(steps):.0f} "
            f"max {max(steps)}  rounds median {np.median(rounds):.0f}"
        )


if __name__ == "__main__":
    main()
