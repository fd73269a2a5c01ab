"""``python -m perfctl``."""

from perfctl.cli import main

main()
