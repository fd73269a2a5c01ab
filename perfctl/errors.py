"""The one exception tree of perfctl, and the exit codes it maps to.

Every error a user can cause or meet is a :class:`PerfctlError` carrying a
one-line ``message`` and a ``hint``. The CLI prints them as::

    Error: <message>
    Hint: <hint>

and exits with the class's ``exit_code``:

==== =====================================================================
code meaning
==== =====================================================================
0    ok
1    regression found (only when gating, e.g. ``--fail-on-regression``)
2    usage or configuration error (:class:`UsageError`, :class:`ConfigError`,
     :class:`RegimeLoadError`, :class:`GitError`, :class:`PlanError`,
     :class:`StoreError`: an unknown id, or nothing stored yet to work from)
3    build, regime or tool failure (:class:`BuildError`, :class:`RegimeFailed`,
     :class:`ProfilerUnavailable`, :class:`ProfileFailed`, :class:`PublishError`)
==== =====================================================================
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_REGRESSION = 1
EXIT_USAGE = 2
EXIT_FAILURE = 3


class PerfctlError(Exception):
    """Base class: a message, a hint and an exit code."""

    exit_code = EXIT_FAILURE

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class UsageError(PerfctlError):
    """Bad command-line usage (unknown regime glob, conflicting flags...)."""

    exit_code = EXIT_USAGE


class ConfigError(PerfctlError):
    """Bad or missing project configuration."""

    exit_code = EXIT_USAGE


class RegimeLoadError(PerfctlError):
    """A regimes file is missing or cannot be imported."""

    exit_code = EXIT_USAGE


class GitError(PerfctlError):
    """A ref does not resolve, or the directory is not a git repository."""

    exit_code = EXIT_USAGE


class GitMissing(PerfctlError):
    """No usable ``git`` executable: a missing tool, not a bad ref."""

    exit_code = EXIT_FAILURE


class PlanError(PerfctlError):
    """A plan document or its phase configuration is invalid."""

    exit_code = EXIT_USAGE


class LockTimeout(PerfctlError):
    """Another perfctl process holds the project lock."""

    exit_code = EXIT_FAILURE


class BuildError(PerfctlError):
    """Building a ref's environment failed."""

    exit_code = EXIT_FAILURE


class RegimeFailed(PerfctlError):
    """One or more regimes failed while measuring."""

    exit_code = EXIT_FAILURE


class ProfilerUnavailable(PerfctlError):
    """py-spy is missing or may not attach (ptrace)."""

    exit_code = EXIT_FAILURE


class ProfileFailed(PerfctlError):
    """A profile produced no samples or the regime failed under the profiler."""

    exit_code = EXIT_FAILURE


class PublishError(PerfctlError):
    """Posting to the GitHub API failed."""

    exit_code = EXIT_FAILURE


class StoreError(PerfctlError):
    """The result store is unreadable or an id is unknown."""

    exit_code = EXIT_USAGE
