"""Jinja2 templates (ship inside the package as perfctl.render.templates)."""
