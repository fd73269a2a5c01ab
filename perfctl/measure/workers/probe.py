"""Probe worker: import regimes files and print their expanded regimes as JSON.

Run as ``python probe.py FILE...`` in the target environment, so imports and
``requires`` are judged where the regimes will actually run.
"""

import sys

# Importing the user's regimes files must not leave __pycache__ in their checkout.
sys.dont_write_bytecode = True

# This script's folder must not shadow modules; perfctl itself is importable
# from the environment (installed, via perfctl's runtime .pth file, or, measuring in
# place, through the PYTHONPATH perfctl runs with).
if sys.path and sys.path[0].endswith("workers"):
    del sys.path[0]

import json  # noqa: E402
from pathlib import Path  # noqa: E402

from perfctl.measure.procs import die_with_parent  # noqa: E402
from perfctl.regimes import loader, requirements  # noqa: E402


def main(argv: list[str]) -> int:
    """Print {"regimes": [...]} or {"error": {...}} on stdout."""
    try:
        defs = loader.load_files([Path(a) for a in argv])
    except loader.LoadFailure as exc:
        print(
            "perfctl-probe: " + json.dumps({"error": {"where": exc.where, "message": exc.message}})
        )
        return 0
    out = []
    for d in defs:
        skip = requirements.unmet(d.requires)
        for full, kwargs in d.expand():
            out.append(
                {
                    "name": full,
                    "family": d.family,
                    "params": {
                        k: repr(v) if not isinstance(v, (int, float, str, bool)) else v
                        for k, v in kwargs.items()
                    },
                    "ops": d.ops,
                    "baseline": d.baseline_for(kwargs),
                    "requires": list(d.requires),
                    "description": d.description,
                    "source": d.source,
                    "tags": list(d.tags),
                    "timeout": d.timeout,
                    "clock": d.clock,
                    "max_peak": d.max_peak,
                    "threshold": d.threshold,
                    "skip_reason": skip,
                }
            )
    print("\nperfctl-probe: " + json.dumps({"regimes": out}))
    return 0


if __name__ == "__main__":
    # A SIGKILL of perfctl (or of pyperf's master) must take this worker with it.
    # Not at import: multiprocessing's spawned children re-import this file.
    die_with_parent()
    sys.exit(main(sys.argv[1:]))
