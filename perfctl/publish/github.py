"""A small GitHub REST client for one pull request's issue comments.

Only these endpoints are used::

    GET   {api}/repos/{owner}/{repo}/issues/{number}/comments   (paginated, Link)
    POST  {api}/repos/{owner}/{repo}/issues/{number}/comments
    PATCH {api}/repos/{owner}/{repo}/issues/comments/{id}
    GET   {api}/user                   who the token is (a user or PAT token)
    POST  {graphql}  viewer { login }  who it is when /user says 403 (App/Actions tokens)

perfctl only ever updates a marked comment **written by the token's own
identity**: anyone can post a comment whose first line is the marker, and
patching theirs would let them show fake results. The identity is asked
only when a marked comment exists; an App or Actions token (``GET /user``
answers 403) is identified by GraphQL's ``viewer`` (``<app-slug>[bot]``),
else taken to be the Actions bot, ``github-actions[bot]``. A wrong guess can
only cost a second comment, never someone else's.

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
from typing import Any
from urllib.parse import urlsplit

from perfctl import __version__
from perfctl.errors import PublishError, UsageError
from perfctl.publish.answers import SCOPE_HINT, GitHubHTTPError, http_error
from perfctl.publish.retry import (
    DEFAULT_MAX_WAIT_S,
    RetryPolicy,
    is_rate_limited,
    policy_from_env,
    retry_delay,
)

__all__ = [  # the retry rules and error answers live apart; importers find them here too
    "DEFAULT_MAX_WAIT_S",
    "SCOPE_HINT",
    "GitHubHTTPError",
    "RetryPolicy",
    "is_rate_limited",
    "policy_from_env",
    "retry_delay",
]

DEFAULT_API_URL = "https://api.github.com"
MAX_PAGES = 100  # 10,000 comments: more means something is wrong
_REPO = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
_TOKEN = re.compile(r"^[\x21-\x7e]+$")  # printable ASCII, no spaces
_LOGIN = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})(?:\[bot\])?$")
ACTIONS_BOT = "github-actions[bot]"  # who an Actions GITHUB_TOKEN comments as
VIEWER_QUERY = "query { viewer { login } }"


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


def _clip(text: str, limit: int = 80) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def graphql_url(api_url: str) -> str:
    """GraphQL's endpoint for a REST base (GitHub Enterprise: ``/api/v3`` -> ``/api/graphql``)."""
    base = api_url.rstrip("/")
    return base.removesuffix("/v3") + "/graphql" if base.endswith("/api/v3") else base + "/graphql"


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
        self._login: str | None = None
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

    def identity(self) -> str:
        """The login comments made with this token carry (asked once, then cached)."""
        if self._login is None:
            self._login = self._ask_identity()
        return self._login

    def _ask_identity(self) -> str:
        try:
            data, _ = self._call("GET", f"{self.api_url}/user")
        except GitHubHTTPError as exc:
            if exc.status != 403:
                raise
            # An App installation or Actions token may not read /user.
            return self._viewer_login() or ACTIONS_BOT
        return _login(_get(data, "login"), "GET /user")

    def _viewer_login(self) -> str | None:
        """The bot login GraphQL reports for an App token, or None if it will not say."""
        try:
            data, _ = self._call("POST", graphql_url(self.api_url), {"query": VIEWER_QUERY})
        except GitHubHTTPError:
            return None
        login = _get(data, "data", "viewer", "login")
        return _login(login, "viewer") if login is not None else None

    def create_comment(self, target: Target, body: str, mark: str) -> dict[str, Any]:
        """POST a new comment; before re-posting after a 5xx, look for it first."""

        def posted_after_all() -> dict[str, Any] | None:
            # A 502 may hide a comment that was created: never post it twice.
            return find_marked(self.list_comments(target), mark, self.identity())

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
                raise self._scrub(http_error(method, url, resp))
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
            exc.message = exc.message.replace(self._token, "***")
            exc.hint = exc.hint.replace(self._token, "***")
            exc.args = (exc.message,)
        return exc


def _get(data: Any, *keys: str) -> Any:
    for key in keys:
        data = data.get(key) if isinstance(data, dict) else None
    return data


def _login(value: Any, where: str) -> str:
    if not isinstance(value, str) or not _LOGIN.match(value):
        raise PublishError(
            f"GitHub's {where} answer names no valid login",
            "check GITHUB_API_URL points at the REST API",
        )
    return value


def _json(resp: Any) -> Any:
    try:
        return resp.json() if resp.content else None
    except (ValueError, json.JSONDecodeError) as exc:
        raise PublishError(
            f"GitHub answered {resp.status_code} with invalid JSON",
            "check GITHUB_API_URL points at the REST API",
        ) from exc


# -- the one operation -----------------------------------------------------------
def is_marked(comment: dict[str, Any], mark: str) -> bool:
    """True when the comment's first line is exactly ``mark``."""
    body = comment.get("body") or ""
    return isinstance(body, str) and body.split("\n", 1)[0].strip() == mark


def find_marked(comments: list[dict[str, Any]], mark: str, author: str) -> dict[str, Any] | None:
    """The oldest comment by ``author`` (the token's login) whose first line is ``mark``.

    A marked comment by anyone else is ignored: updating it would hand them the
    comment perfctl vouches for.
    """
    for c in comments:
        login = _get(c, "user", "login")
        if is_marked(c, mark) and isinstance(login, str) and login.lower() == author.lower():
            return c
    return None


def upsert_comment(
    gh: GitHub, target: Target, body: str, mark: str, *, create: bool = True
) -> CommentResult:
    """Update perfctl's own marked comment in place, or create it (when ``create``)."""
    comments = gh.list_comments(target)
    # Who we are matters only when some comment carries the marker.
    mine = any(is_marked(c, mark) for c in comments)
    existing = find_marked(comments, mark, gh.identity()) if mine else None
    if existing is not None:
        cid = _comment_id(existing)
        if existing.get("body") == body:
            return CommentResult("unchanged", cid, existing.get("html_url", ""))
        data = gh.update_comment(target, cid, body)
        return CommentResult("updated", cid, data.get("html_url", ""))
    if not create:
        return CommentResult("skipped")
    data = gh.create_comment(target, body, mark)
    return CommentResult("created", data.get("id"), data.get("html_url", ""))


def _comment_id(comment: dict[str, Any]) -> int:
    cid = comment.get("id")
    if isinstance(cid, bool) or not isinstance(cid, int) or cid < 1:
        raise PublishError(
            f"GitHub listed a comment with an invalid id ({str(cid)[:20]!r})",
            "check GITHUB_API_URL points at the REST API",
        )
    return cid
