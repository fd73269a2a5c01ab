"""The README documents every command and flag, and its set-up commands match .ci/run."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _commands() -> list[tuple[str, object]]:
    from perfctl.cli import app as cli

    cli._register_all()
    group = typer.main.get_command(cli.app)
    out = []

    def walk(cmd: object, prefix: str) -> None:
        subs = getattr(cmd, "commands", None)
        if subs:
            for name, sub in subs.items():
                walk(sub, f"{prefix} {name}".strip())
        else:
            out.append((prefix, cmd))

    walk(group, "")
    return out


COMMANDS = _commands()


def test_every_command_is_documented() -> None:
    names = [name for name, _ in COMMANDS]
    assert {"run", "list", "compare", "profile", "report", "plan init", "demo"} <= set(names)
    for name in names:
        assert f"perfctl {name}" in README, f"`perfctl {name}` missing from README.md"


@pytest.mark.parametrize("name,cmd", COMMANDS, ids=[n for n, _ in COMMANDS])
def test_every_flag_is_documented(name: str, cmd: object) -> None:
    for param in getattr(cmd, "params", []):
        for opt in getattr(param, "opts", []):
            if opt.startswith("--") and opt != "--help":
                assert opt in README, f"{opt} of `perfctl {name}` missing from README.md"


def test_two_setup_commands_and_ci_run_the_same_tests() -> None:
    head = README.split("## Contents")[0]
    commands = [ln for ln in head.splitlines() if ln.startswith("python3 -m venv")]
    assert len(commands) == 2
    assert commands[0].endswith("perfctl demo")
    test_cmd = commands[1].split("&& ")[-1]
    assert test_cmd == "python -m pytest -q"
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert test_cmd in ci and "pip install -q -e '.[dev]'" in ci
