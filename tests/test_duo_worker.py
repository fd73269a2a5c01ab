"""The same-process worker's bookkeeping: which loaded modules belong to a side.

The worker swaps each side's modules in and out around every value; these tests load
``measure/workers/duo.py`` as a module and drive its ``Side`` directly.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import perfctl.measure.workers

WORKER = Path(perfctl.measure.workers.__file__).parent / "duo.py"


@pytest.fixture
def duo() -> Iterator[Any]:
    """The worker module, loaded without leaving its start-up settings behind."""
    saved = sys.dont_write_bytecode
    spec = importlib.util.spec_from_file_location("perfctl_duo_worker_test", WORKER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    yield module
    sys.dont_write_bytecode = saved


def _module(name: str, file: Path | None) -> types.ModuleType:
    module = types.ModuleType(name)
    if file is not None:
        module.__file__ = str(file)
    return module


def test_a_side_owns_the_files_under_its_roots_through_a_symlink(duo: Any, tmp_path: Path) -> None:
    root = tmp_path / "tree"
    (root / "pkg").mkdir(parents=True)
    (tmp_path / "link").symlink_to(root)  # a worktree reached through a link
    side = duo.Side("base", {"roots": [str(tmp_path / "link")], "cwd": str(tmp_path)})
    assert side.owns(_module("pkg.mod", root / "pkg" / "mod.py"))
    assert side.owns(_module("perfctl_regimes_x", None))  # the regimes module, by name
    assert not side.owns(_module("other", tmp_path / "treeish" / "mod.py"))  # a prefix only
    assert not side.owns(_module("builtin", None))


def test_ownership_is_worked_out_once_per_file(
    duo: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    side = duo.Side("base", {"roots": [str(tmp_path)], "cwd": str(tmp_path)})
    mine, theirs = _module("mine", tmp_path / "mine.py"), _module("theirs", Path("/x/theirs.py"))
    first = (side.owns(mine), side.owns(theirs))

    def no_realpath(path: str) -> str:
        raise AssertionError(f"realpath({path}) asked again")

    monkeypatch.setattr(os.path, "realpath", no_realpath)
    # leave() asks about every loaded module after every value: later asks are cached.
    assert (
        [(side.owns(mine), side.owns(theirs)) for _ in range(3)]
        == [first] * 3
        == [(True, False)] * 3
    )


def test_leave_takes_a_sides_modules_out_and_enter_puts_them_back(duo: Any, tmp_path: Path) -> None:
    side = duo.Side("head", {"roots": [str(tmp_path)], "cwd": str(tmp_path)})
    here = os.getcwd()
    saved_path, saved_env = list(sys.path), os.environ.get("PYTHONPATH")
    mine = _module("perfctl_duo_test_mine", tmp_path / "mine.py")
    sys.modules[mine.__name__] = mine
    try:
        side.leave()
        assert mine.__name__ not in sys.modules and side.modules[mine.__name__] is mine
        side.enter(saved_path)
        assert sys.modules[mine.__name__] is mine and sys.path[0] == str(tmp_path)
        side.leave()
        assert mine.__name__ not in sys.modules  # the second time, from the cache
    finally:
        sys.modules.pop(mine.__name__, None)
        sys.path[:] = saved_path
        os.chdir(here)
        if saved_env is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved_env
