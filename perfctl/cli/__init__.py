"""The typer layer: parses options and calls one job function per command, nothing more."""
