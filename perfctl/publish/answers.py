"""GitHub's final error answers as PublishErrors with a hint that says what to fix."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from perfctl.errors import PublishError

SCOPE_HINT = (
    "the token needs `pull-requests: write` and `issues: write` permissions; "
    "pull requests from forks only get a read-only token, so post from a "
    "`workflow_run` workflow (see `perfctl init --ci github`)"
)


class GitHubHTTPError(PublishError):
    """A final (non-retried) error answer; ``status`` is its HTTP status."""

    def __init__(self, message: str, hint: str, status: int) -> None:
        super().__init__(message, hint)
        self.status = status


def _clip(text: str, limit: int = 80) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _api_message(resp: Any) -> str:
    try:
        data = resp.json()
    except ValueError:
        return ""
    return _clip(data.get("message", ""), 200) if isinstance(data, dict) else ""


def http_error(method: str, url: str, resp: Any) -> GitHubHTTPError:
    """The PublishError for a final (non-retryable) error answer."""
    path = urlsplit(url).path
    status = f"{resp.status_code} {resp.reason_phrase}"
    said = _api_message(resp)
    said = f": {said}" if said else ""
    if resp.status_code == 401:
        return GitHubHTTPError(
            f"GitHub rejected the token: {status} ({method} {path})",
            "set GITHUB_TOKEN to a valid token; in GitHub Actions add "
            "`GITHUB_TOKEN: ${{ secrets.GITHUB_TOKEN }}` to the step's env",
            401,
        )
    if resp.status_code == 403:
        return GitHubHTTPError(
            f"GitHub refused the request: {status} ({method} {path}){said}", SCOPE_HINT, 403
        )
    if resp.status_code == 404:
        return GitHubHTTPError(
            f"GitHub answered {status} for {method} {path}",
            "check --repo OWNER/NAME and --pr N; a token that cannot see a "
            "private repository also gets 404",
            404,
        )
    return GitHubHTTPError(
        f"GitHub rejected the request: {status} ({method} {path}){said}",
        "re-run with --dry-run to inspect the comment body",
        resp.status_code,
    )
