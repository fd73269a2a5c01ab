"""CLI start-up stays light: heavy libraries load only in the stage that needs them."""

from __future__ import annotations

import os
import subprocess
import sys

HEAVY = ("pandas", "plotly", "jinja2", "httpx", "numpy", "scipy", "git")


def test_cli_import_does_not_load_heavy_libraries() -> None:
    code = (
        "import sys\n"
        "from perfctl.cli import app as cli\n"
        "cli._register_all()\n"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_version_and_help_work() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "perfctl", "--version"], capture_output=True, text=True
    )
    assert out.returncode == 0 and out.stdout.startswith("perfctl ")
    helptext = subprocess.run(
        [sys.executable, "-m", "perfctl", "--help"], capture_output=True, text=True
    )
    assert helptext.returncode == 0
    for panel in ("Measure", "Analyse", "Publish", "Manage"):
        assert panel in helptext.stdout


def test_help_shows_no_placeholder_for_plain_flags() -> None:
    # `--version <bool>` read as if the flag took a value; value options keep theirs.
    env = {**os.environ, "COLUMNS": "200"}
    for args in ([], ["compare"], ["profile"], ["clean"], ["plan", "update"]):
        out = subprocess.run(
            [sys.executable, "-m", "perfctl", *args, "--help"],
            capture_output=True,
            text=True,
            env=env,
        )
        assert out.returncode == 0, out.stderr
        assert "<bool>" not in out.stdout, args
        assert "--help" in out.stdout
        if args == ["compare"]:
            assert "<int range>" in out.stdout and "<abba|random>" in out.stdout


def test_parsing_a_command_loads_no_validation_library(tmp_path: object) -> None:
    # typer 0.29 coerces every option through pydantic (0.1-0.2 s per call, here on
    # every invocation): pyproject keeps typer below it, and this test says why.
    code = (
        "import sys\n"
        "from perfctl.cli.app import main\n"
        f"sys.argv = ['perfctl', 'runs', '--format', 'json', '-C', {str(tmp_path)!r}]\n"
        "try:\n"
        "    main()\n"
        "except SystemExit:\n"
        "    pass\n"
        f"print(sorted(m for m in {(*HEAVY, 'pydantic')!r} if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout + out.stderr
