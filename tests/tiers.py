"""Test tiers (README, Development): every test gets exactly one of unit, cli, e2e.

unit: in-process, no perfctl/pyperf/py-spy process (git for a temporary repository
is allowed); cli: the real CLI (in this process unless marked fresh_process) or other
tools as subprocesses, nothing measured; e2e (alias slow): real measurements.
A test that names no tier gets one here.
"""

from __future__ import annotations

import collections
import itertools
import keyword
import os
import re
import subprocess
import types
from pathlib import Path

import pytest

from tests import inprocess

_CLI_FIXTURES = frozenset({"cli", "git_repo"})
_CLI_NAMES = frozenset({"run_cli", "subprocess", "Popen"})
# git for a temporary repository; uname and file are how the platform module asks.
_UNIT_TOOLS = frozenset({"git", "uname", "file"})


def _names(fn: object) -> set[str]:
    """Global and attribute names a function uses, comprehensions and inner functions included."""
    code = getattr(fn, "__code__", fn)
    if not isinstance(code, types.CodeType):
        return set()
    inner = (_names(c) for c in code.co_consts if isinstance(c, types.CodeType))
    return set(code.co_names).union(*inner)


def _starts_processes(item: pytest.Item) -> bool:
    """Whether the test, or a helper of its module that it calls, runs subprocesses."""
    if _CLI_FIXTURES & set(getattr(item, "fixturenames", ())):
        return True
    names = _names(getattr(item, "function", None))
    module = vars(getattr(item, "module", None) or object())
    helpers = (_names(module.get(n)) for n in names if callable(module.get(n)))
    return bool(_CLI_NAMES & names) or any(_CLI_NAMES & h for h in helpers)


def _tier(item: pytest.Item) -> str:
    marks = {m.name for m in item.iter_markers()}
    # A gpu test measures a real device, and the CUDA libraries may start processes as
    # they load (on an H200 the unit tier's guard failed CuPy's probe: "no GPU", skipped).
    if marks & {"e2e", "slow", "gpu"}:
        return "e2e"
    if marks & {"cli", "browser"}:  # headless Chromium is a real process too
        return "cli"
    if "unit" in marks:
        return "unit"
    return "cli" if _starts_processes(item) else "unit"


def _assigned_tier(item: pytest.Item) -> str:
    """The one tier marker pytest_collection_modifyitems gave the test."""
    return next(t for t in ("unit", "cli", "e2e") if item.get_closest_marker(t))


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by the markers given here
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Give every test exactly one tier; e2e and slow mark the same tests."""
    for item in items:
        tier = _tier(item)
        declared = {m.name for m in item.iter_markers()} & {"unit", "cli", "e2e"}
        if declared - {tier}:  # `-m cli` would select an e2e test too
            raise pytest.UsageError(f"{item.nodeid}: marked {sorted(declared)}, tier {tier}")
        item.add_marker(tier)
        if tier == "e2e":
            item.add_marker("slow")
    _heaviest_modules_first(items)


def _heaviest_modules_first(items: list[pytest.Item]) -> None:
    """Modules with the most e2e tests first, then those with the most cli tests, each
    module's tests kept in order.

    pytest-xdist (--dist loadscope) hands each module to one worker, and by default
    the modules with the most tests first: the demo's one 80 s test came last and
    left the other worker idle for a minute. With --no-loadscope-reorder (pyproject)
    it follows this order, and the hundreds of short unit tests fill the tail.
    """

    def module(item: pytest.Item) -> str:
        return item.nodeid.split("::", 1)[0]

    def count(tier: str) -> collections.Counter[str]:
        return collections.Counter(module(i) for i in items if i.get_closest_marker(tier))

    e2e, cli = count("e2e"), count("cli")
    # A stable sort: pytest collects module by module, so modules of one weight keep
    # their order and each module's tests stay together, in order.
    items.sort(key=lambda i: (-e2e[module(i)], -cli[module(i)]))


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """`-n auto` gives three workers per two CPUs where `-m` leaves out every e2e test.

    A unit or cli test measures nothing and waits on git, Chromium or a child much of
    its time: more workers than CPUs took the two tiers from 77 s to 65-67 s on the
    2-core VM; three against four, alternated: 66-67 s against 68-70 s at load 3-4,
    with 8 s less CPU (each worker collects every module), and 55/70 s against
    59/66 s in an earlier pair. An e2e test wants a CPU of its own, so any selection
    that may hold one keeps one worker per CPU (pytest-xdist's own count).
    """
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS") or not _selects_no_e2e(
        config.option.markexpr
    ):
        return None
    cpus = len(os.sched_getaffinity(0))
    return cpus + (cpus + 1) // 2


def _selects_no_e2e(markexpr: str) -> bool:
    """Whether the `-m` expression is false for every e2e test (marked e2e and slow, and
    never unit or cli), whatever its other markers."""
    # Read as Python only where Python reads it as pytest does: marker names, and, or,
    # not, parentheses (pytest takes `True`, `a+b`, `1` or `if` for marker names).
    words = re.findall(r"\w+", markexpr)
    plain = re.fullmatch(r"[\w\s()]+", markexpr) is not None and all(
        w in ("and", "or", "not") or (w.isidentifier() and not keyword.iskeyword(w)) for w in words
    )
    if not plain:
        return False  # empty, or beyond plain names (`mark(arg=1)`): assume it may
    try:
        code = compile(markexpr, "<-m>", "eval")
    except SyntaxError:
        return False
    tiers = {"e2e": True, "slow": True, "unit": False, "cli": False}
    others = sorted(set(code.co_names) - set(tiers))
    if len(others) > 10:
        return False
    for bits in itertools.product((False, True), repeat=len(others)):
        marks = {**dict(zip(others, bits, strict=True)), **tiers}
        try:
            if eval(code, {"__builtins__": {}}, marks):  # noqa: S307 - names only
                return False
        except Exception:  # noqa: BLE001 - not a plain marker expression
            return False
    return True


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """run_cli runs perfctl in this process for a cli test not marked fresh_process.

    Set before any fixture of the test, module-scoped ones included (a module fixture
    that calls run_cli runs it the way the first test that needs it is tiered)."""
    fresh = item.get_closest_marker("fresh_process") is not None
    inprocess.ENABLED[0] = _assigned_tier(item) == "cli" and not fresh


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    """Teardowns and the next test's set-up start from subprocesses."""
    inprocess.ENABLED[0] = False


# What measuring starts: perfctl's measuring workers, and the profilers. Probing a ref
# (``workers/probe.py``) and building one measure nothing.
_MEASURING_WORKERS = frozenset({"bench.py", "duo.py", "counters.py", "profile.py", "tracing.py"})
_MEASURING_TOOLS = frozenset({"py-spy", "valgrind"})


def _refusal(tier: str, argv: list[str]) -> str | None:
    """Why a test of this tier may not start ``argv``, or None."""
    from perfctl.measure.workers import WORKERS

    tool = Path(argv[0]).name
    if tier == "unit" and tool not in _UNIT_TOOLS:
        return f"a unit test started {argv[0]!r}: mark the test cli or e2e"
    measuring = tool in _MEASURING_TOOLS or any(
        Path(a).name in _MEASURING_WORKERS and Path(a).parent == WORKERS for a in argv
    )
    if tier == "cli" and measuring:
        return f"a cli test measured ({Path(argv[0]).name} {' '.join(argv[1:3])}): mark it e2e"
    return None


@pytest.fixture(autouse=True)
def _tiers_start_only_their_processes(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A unit test that starts anything but git fails (mark it `cli` or `e2e`), and so
    does a cli test that starts a measuring worker or a profiler in this process (the
    in-process CLI's; a subprocess's own children are not seen): mark it `e2e`."""
    tier = _assigned_tier(request.node)
    if tier == "e2e":
        return
    if tier == "unit":
        from perfctl.measure import machine

        # The machine fingerprint asks nvidia-smi, a process, where there is one: in a
        # unit test this machine has no GPU (tests that want some patch gpus themselves).
        monkeypatch.setattr(machine, "gpus", lambda: ())
    real = subprocess.Popen.__init__

    def guarded(self: subprocess.Popen[bytes], args: object, *a: object, **kw: object) -> None:
        argv = [args] if isinstance(args, str | bytes | os.PathLike) else list(args)  # type: ignore[call-overload]
        refused = _refusal(tier, [os.fsdecode(x) for x in argv])
        if refused:
            raise AssertionError(refused)
        real(self, args, *a, **kw)  # type: ignore[call-overload]

    monkeypatch.setattr(subprocess.Popen, "__init__", guarded)
