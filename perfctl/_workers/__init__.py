"""Scripts run as separate worker processes (kept alone in this folder: see bench.py)."""
