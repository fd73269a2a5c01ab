"""``python -m perfctl``."""

from perfctl.cli.app import main

main()
