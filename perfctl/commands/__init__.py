"""Typer command modules: each parses options and calls one API function.

Every module exposes ``register(app)``; :mod:`perfctl.cli` calls them all.
Heavy imports (pandas, plotly, jinja2, httpx) happen inside command bodies.
"""

from perfctl.commands import compare, demo, measure, plan, profile, publish, report

COMMAND_MODULES = (measure, compare, profile, report, plan, publish, demo)
