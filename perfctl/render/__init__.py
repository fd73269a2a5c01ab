"""Rendering: terminal, markdown, PR comment, charts, flame graphs and HTML reports."""
