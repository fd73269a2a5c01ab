"""The regime API's records (written out, not dataclasses: the worker imports them) and
the loader's view of a regime function."""

from __future__ import annotations

import copy
import functools
import pickle
from collections.abc import Iterator
from typing import Any

import pytest

from perfctl.regimes import api, loader


def _defn(func: Any, **changes: Any) -> api.RegimeDef:
    d = api.RegimeDef(func, "r", "f", 1, {"n": [1, 2]}, None, (), None, (), "doc")
    return d.replace(**changes)


def run() -> int:
    return 1


def loops(n: int) -> float:
    return float(n)


def test_records_behave_as_frozen_dataclasses_did() -> None:
    timed = api.Timed(run, loops)
    assert timed == api.Timed(run, loops) != api.Timed(run, float)
    assert hash(timed) == hash(api.Timed(run, loops))
    assert repr(timed) == f"Timed(run={run!r}, time_loops={loops!r}, metrics=None)"
    for twin in (pickle.loads(pickle.dumps(timed)), copy.copy(timed), copy.deepcopy(timed)):
        assert twin == timed
    with pytest.raises(AttributeError, match="frozen"):
        timed.run = run
    match timed:
        case api.Timed(first, second, None):
            assert (first, second) == (run, loops)
        case _:
            pytest.fail("Timed does not match positionally")
    d = _defn(len)
    assert d.replace(name="s").name == "s" and d.name == "r"  # a copy, the original kept
    assert d.replace(source="x.py") == _defn(len, source="x.py") != d
    assert d.expand() == [("r[n=1]", {"n": 1}), ("r[n=2]", {"n": 2})]
    with pytest.raises(TypeError):  # params is a dict, as with the dataclass
        hash(d)


def test_a_partial_of_a_generator_function_is_set_up_and_torn_down() -> None:
    torn: list[int] = []

    def gen(n: int, scale: int) -> Iterator[Any]:
        yield lambda: n * scale
        torn.append(n)

    with loader.open_regime(_defn(functools.partial(gen, scale=3)), {"n": 2}) as instance:
        assert instance.run() == 6
    assert torn == [2]
    with loader.open_regime(_defn(lambda n: lambda: n), {"n": 5}) as instance:
        assert instance.run() == 5
