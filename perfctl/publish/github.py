"""A small GitHub REST client for one pull request's issue comments.

Only three endpoints are used::

    GET   {api}/repos/{owner}/{repo}/issues/{number}/comments   (paginated, Link)
    POST  {api}/repos/{owner}/{repo}/issues/{number}/comments
    PATCH {api}/repos/{owner}/{repo}/issues/comments/{id}

The API base comes from ``GITHUB_API_URL`` (GitHub Enterprise:
``https://HOST/api/v3``) and the token from ``GITHUB_TOKEN``. Rate limits
(429, or 403 with ``x-ratelimit-remaining: 0`` or ``retry-after``), 5xx answers
and network errors are retried with exponential backoff, waiting as long as
``retry-after``/``x-ratelimit-reset`` ask, within one wall-clock budget per
client (``PERFCTL_GITHUB_MAX_WAIT`` seconds, default 60). Other errors become
:class:`~perfctl.errors.PublishError` with a hint.

The token lives only in the request headers: it is never printed, logged,
written, shown by ``repr`` or put in an exception (messages are also scrubbed).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import urlsplit

from perfctl import __version__
from perfctl.errors import PublishError, UsageError

DEFAULT_API_URL = "https://api.github.com"
DEFAULT_MAX_WAIT_S = 60.0
MAX_PAGES = 100  # 10,000 comments: more means something is wrong
_REPO = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
_TOKEN = re.compile(r"^[\x21-\x7e]+$")  # printable ASCII, no spaces

SCOPE_HINT = (
    "the token needs `pull-requests: write` and `issues: write` permissions; "
    "pull requests from forks only get a read-only token, so post from a "
    "`workflow_run` workflow (see `perfctl init --ci github`)"
)


@dataclass(frozen=True)
class Target:
    """The pull request (an issue, to the comments API) that gets the comment."""

    owner: str
    name: str
    number: int

    @property
    def repo(self) -> str:
        """``OWNER/NAME``."""
        return f"{self.owner}/{self.name}"


@dataclass(frozen=True)
class RetryPolicy:
    """How long to keep trying: total budget, first backoff, per-request timeout."""

    max_wait_s: float = DEFAULT_MAX_WAIT_S
    backoff_s: float = 1.0
    max_backoff_s: float = 30.0
    timeout_s: float = 30.0


@dataclass(frozen=True)
class CommentResult:
    """What happened to the comment: created, updated, unchanged or skipped."""

    action: str
    comment_id: int | None = None
    url: str = ""


def parse_target(repo: str, number: int) -> Target:
    """A Target from ``OWNER/NAME`` and a PR number, or UsageError."""
    if not _REPO.match(repo or ""):
        raise UsageError(
            f"--repo `{_clip(repo)}` is not of the form OWNER/NAME",
            "pass e.g. --repo octo-org/octo-repo",
        )
    if number < 1:
        raise UsageError(
            f"--pr {number} is not a pull request number",
            "pass the number shown in the PR's URL, e.g. --pr 42",
        )
    owner, name = repo.split("/")
    return Target(owner, name, number)


def api_url_from_env(env: Mapping[str, str]) -> str:
    """``GITHUB_API_URL`` (validated, no trailing slash) or the public API."""
    url = (env.get("GITHUB_API_URL") or DEFAULT_API_URL).rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise UsageError(
            f"GITHUB_API_URL `{_clip(url)}` is not an http(s) URL",
            "unset it for github.com, or use https://HOST/api/v3 for GitHub Enterprise",
        )
    return url


def token_from_env(env: Mapping[str, str]) -> str | None:
    """``GITHUB_TOKEN`` stripped of whitespace, or None when unset/empty."""
    token = (env.get("GITHUB_TOKEN") or "").strip()
    if token and not _TOKEN.match(token):
        # Say what is wrong without ever echoing the value.
        raise UsageError(
            "GITHUB_TOKEN contains characters no GitHub token has",
            "set it to the token alone (no quotes, spaces or newlines)",
        )
    return token or None


def policy_from_env(env: Mapping[str, str]) -> RetryPolicy:
    """The retry policy, with ``PERFCTL_GITHUB_MAX_WAIT``/``_BACKOFF`` overrides."""
    return RetryPolicy(
        max_wait_s=_env_float(env, "PERFCTL_GITHUB_MAX_WAIT", DEFAULT_MAX_WAIT_S),
        backoff_s=_env_float(env, "PERFCTL_GITHUB_BACKOFF", 1.0),
    )


def _env_float(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if value < 0:
        raise UsageError(
            f"{name}={_clip(raw)} is not a number of seconds", f"set {name} to e.g. 60, or unset it"
        )
    return value


def _clip(text: str, limit: int = 80) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


# -- retry decisions (pure) ----------------------------------------------------
def _header_seconds(value: str | None, now: float) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:  # retry-after may also be an HTTP date
        return max(0.0, parsedate_to_datetime(value).timestamp() - now)
    except (TypeError, ValueError):
        return None


def is_rate_limited(status: int, headers: Mapping[str, str]) -> bool:
    """429, or 403 that GitHub marks as a (primary or secondary) rate limit."""
    if status == 429:
        return True
    return status == 403 and (
        headers.get("x-ratelimit-remaining") == "0" or "retry-after" in headers
    )


def retry_delay(
    status: int | None, headers: Mapping[str, str], attempt: int, policy: RetryPolicy, now: float
) -> float | None:
    """Seconds to wait before retrying, or None when the answer is final.

    ``status`` None means the request never got an answer (network error).
    """
    backoff = min(policy.backoff_s * 2**attempt, policy.max_backoff_s)
    if status is not None and is_rate_limited(status, headers):
        asked = _header_seconds(headers.get("retry-after"), now)
        if asked is None and headers.get("x-ratelimit-reset"):
            reset = _header_seconds(headers.get("x-ratelimit-reset"), 0.0)
            asked = None if reset is None else max(0.0, reset - now)
        return backoff if asked is None else asked
    if status is None or status >= 500:
        return backoff
    return None


# -- the client ----------------------------------------------------------------
class GitHub:
    """Issue-comment calls with retries; use as a context manager."""

    def __init__(
        self,
        token: str,
        api_url: str = DEFAULT_API_URL,
        policy: RetryPolicy | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        import httpx

        self._token = token
        self.api_url = api_url.rstrip("/")
        self.policy = policy or RetryPolicy()
        self._sleep = sleep
        self._deadline = time.monotonic() + self.policy.max_wait_s
        self._client = httpx.Client(
            timeout=self.policy.timeout_s,
            follow_redirects=False,
            headers={
                "Authorization": f"Bearer {token}",
                "Accept": "application/vnd.github+json",
                "X-GitHub-Api-Version": "2022-11-28",
                "User-Agent": f"perfctl/{__version__}",
            },
        )

    def __repr__(self) -> str:
        return f"GitHub(api_url={self.api_url!r})"

    def __enter__(self) -> GitHub:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection pool."""
        self._client.close()

    def list_comments(self, target: Target) -> list[dict[str, Any]]:
        """Every comment of the PR, following ``Link: rel="next"`` pages."""
        url: str | None = self._comments_url(target) + "?per_page=100"
        out: list[dict[str, Any]] = []
        for _ in range(MAX_PAGES):
            if url is None:
                return out
            data, links = self._call("GET", url)
            out.extend(c for c in data or [] if isinstance(c, dict))
            url = self._same_origin(links.get("next", {}).get("url"))
        return out

    def create_comment(self, target: Target, body: str, mark: str) -> dict[str, Any]:
        """POST a new comment; before re-posting after a 5xx, look for it first."""

        def posted_after_all() -> dict[str, Any] | None:
            # A 502 may hide a comment that was created: never post it twice.
            return find_marked(self.list_comments(target), mark)

        data, _ = self._call("POST", self._comments_url(target), {"body": body}, posted_after_all)
        return data if isinstance(data, dict) else {}

    def update_comment(self, target: Target, comment_id: int, body: str) -> dict[str, Any]:
        """PATCH an existing comment's body."""
        url = f"{self.api_url}/repos/{target.owner}/{target.name}/issues/comments/{comment_id}"
        data, _ = self._call("PATCH", url, {"body": body})
        return data if isinstance(data, dict) else {}

    # -- plumbing --------------------------------------------------------------
    def _comments_url(self, target: Target) -> str:
        return f"{self.api_url}/repos/{target.repo}/issues/{target.number}/comments"

    def _same_origin(self, url: str | None) -> str | None:
        if url is None:
            return None
        ours, theirs = urlsplit(self.api_url), urlsplit(url)
        if (ours.scheme, ours.netloc) != (theirs.scheme, theirs.netloc):
            # Never send the token to another host.
            raise PublishError(
                f"GitHub's next-page link points to another host ({theirs.netloc})",
                "check GITHUB_API_URL",
            )
        return url

    def _call(
        self,
        method: str,
        url: str,
        payload: dict[str, Any] | None = None,
        recheck: Callable[[], Any] | None = None,
    ) -> tuple[Any, dict[str, Any]]:
        """Send one request, retrying within the budget; (JSON, links) or PublishError."""
        import httpx

        attempt, started = 0, time.monotonic()
        while True:
            resp: httpx.Response | None = None
            try:
                resp = self._client.request(method, url, json=payload)
            except httpx.HTTPError as exc:
                status, headers, last = None, {}, f"{type(exc).__name__}: {exc}"
            else:
                if resp.status_code < 300:
                    return _json(resp), {str(k): v for k, v in resp.links.items()}
                status, headers = resp.status_code, dict(resp.headers)
                last = f"{resp.status_code} {resp.reason_phrase}"
            delay = retry_delay(status, headers, attempt, self.policy, time.time())
            if delay is None and resp is not None:
                raise self._scrub(_http_error(method, url, resp))
            limited = status is not None and is_rate_limited(status, headers)
            self._wait(delay or 0.0, attempt, started, last, limited)
            attempt += 1
            if recheck is not None and (status is None or status >= 500):
                found = recheck()
                if found is not None:
                    return found, {}

    def _wait(self, delay: float, attempt: int, started: float, last: str, limited: bool) -> None:
        if time.monotonic() + delay > self._deadline:
            elapsed = time.monotonic() - started
            if limited:
                raise PublishError(
                    f"GitHub rate limit exceeded ({last}); it lifts in {delay:.0f} s, "
                    f"beyond the {self.policy.max_wait_s:g} s wait budget",
                    "re-run after the limit lifts, or raise PERFCTL_GITHUB_MAX_WAIT=SECONDS",
                )
            raise self._scrub(
                PublishError(
                    f"the GitHub API still fails after {attempt + 1} attempts in {elapsed:.0f} s "
                    f"(last: {last})",
                    "GitHub may be degraded (https://www.githubstatus.com), or GITHUB_API_URL "
                    "is wrong; re-run later or raise PERFCTL_GITHUB_MAX_WAIT=SECONDS",
                )
            )
        self._sleep(delay)

    def _scrub(self, exc: PublishError) -> PublishError:
        # Belt and braces: no server echo or library message may carry the token.
        if self._token and (self._token in exc.message or self._token in exc.hint):
            return PublishError(
                exc.message.replace(self._token, "***"), exc.hint.replace(self._token, "***")
            )
        return exc


def _json(resp: Any) -> Any:
    try:
        return resp.json() if resp.content else None
    except (ValueError, json.JSONDecodeError) as exc:
        raise PublishError(
            f"GitHub answered {resp.status_code} with invalid JSON",
            "check GITHUB_API_URL points at the REST API",
        ) from exc


def _api_message(resp: Any) -> str:
    try:
        data = resp.json()
    except ValueError:
        return ""
    return _clip(data.get("message", ""), 200) if isinstance(data, dict) else ""


def _http_error(method: str, url: str, resp: Any) -> PublishError:
    """The PublishError for a final (non-retryable) error answer."""
    path = urlsplit(url).path
    status = f"{resp.status_code} {resp.reason_phrase}"
    said = _api_message(resp)
    said = f": {said}" if said else ""
    if resp.status_code == 401:
        return PublishError(
            f"GitHub rejected the token: {status} ({method} {path})",
            "set GITHUB_TOKEN to a valid token; in GitHub Actions add "
            "`GITHUB_TOKEN: ${{ secrets.GITHUB_TOKEN }}` to the step's env",
        )
    if resp.status_code == 403:
        return PublishError(
            f"GitHub refused the request: {status} ({method} {path}){said}", SCOPE_HINT
        )
    if resp.status_code == 404:
        return PublishError(
            f"GitHub answered {status} for {method} {path}",
            "check --repo OWNER/NAME and --pr N; a token that cannot see a "
            "private repository also gets 404",
        )
    return PublishError(
        f"GitHub rejected the request: {status} ({method} {path}){said}",
        "re-run with --dry-run to inspect the comment body",
    )


# -- the one operation -----------------------------------------------------------
def find_marked(comments: list[dict[str, Any]], mark: str) -> dict[str, Any] | None:
    """The oldest comment whose first line is exactly ``mark``."""
    for c in comments:
        body = c.get("body") or ""
        if body.split("\n", 1)[0].strip() == mark:
            return c
    return None


def upsert_comment(
    gh: GitHub, target: Target, body: str, mark: str, *, create: bool = True
) -> CommentResult:
    """Update the marked comment in place, or create it (when ``create``)."""
    existing = find_marked(gh.list_comments(target), mark)
    if existing is not None:
        cid = int(existing["id"])
        if existing.get("body") == body:
            return CommentResult("unchanged", cid, existing.get("html_url", ""))
        data = gh.update_comment(target, cid, body)
        return CommentResult("updated", cid, data.get("html_url", ""))
    if not create:
        return CommentResult("skipped")
    data = gh.create_comment(target, body, mark)
    return CommentResult("created", data.get("id"), data.get("html_url", ""))
