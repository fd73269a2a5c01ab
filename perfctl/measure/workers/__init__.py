"""Scripts run as separate worker processes (kept alone in this folder: see bench.py)."""

from pathlib import Path

# The folder itself: worker scripts are run by path, never imported.
WORKERS = Path(__file__).parent
