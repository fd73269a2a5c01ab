"""perfctl: benchmark-and-profiling orchestration for Python projects.

Only the regime API is exported here; it must stay import-light because every
benchmark worker imports it.
"""

from perfctl.regimes.api import Timed, regime, subject

__version__ = "0.1.0"
__all__ = ["Timed", "regime", "subject", "__version__"]
