"""The GitHub client and `perfctl comment`, against a real local HTTP server."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from perfctl.errors import PublishError, UsageError
from perfctl.model import IMPROVED, NO_CHANGE, REGRESSED
from perfctl.publish.github import (
    GitHub,
    RetryPolicy,
    Target,
    parse_target,
    policy_from_env,
    retry_delay,
    token_from_env,
    upsert_comment,
)
from tests.conftest import run_cli
from tests.test_comment import comparison, regime

TOKEN = "ghp_TESTTOKEN0123456789abcdefSECRET"
REPO = "octo/app"
MARK = "<!-- perfctl:comment -->"


# -- the fake GitHub ------------------------------------------------------------------
@dataclass
class Scripted:
    """A canned answer for the next matching request (method None: any)."""

    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: Any = None
    method: str | None = None
    then_handle: bool = False  # do the real work, then still answer `status`


@dataclass
class FakeGitHub:
    """State of the local server: comments per PR, scripted failures, a request log."""

    token: str = TOKEN
    repos: set[str] = field(default_factory=lambda: {REPO})
    page_size: int = 2  # small, so pagination is always exercised
    comments: dict[tuple[str, int], list[dict[str, Any]]] = field(default_factory=dict)
    script: list[Scripted] = field(default_factory=list)
    log: list[tuple[str, str, float]] = field(default_factory=list)
    next_id: int = 1000
    url: str = ""
    login: str = "perfctl-bot"  # who the token is: comments it posts carry this login
    app_token: bool = False  # an App/Actions token: GET /user answers 403
    graphql: bool = True  # GraphQL's viewer query answers (with `login`)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def bodies(self, pr: int = 7, repo: str = REPO) -> list[str]:
        """The bodies of one PR's comments, oldest first."""
        return [c["body"] for c in self.comments.get((repo, pr), [])]

    def add(
        self, body: str, pr: int = 7, repo: str = REPO, user: str = "someone"
    ) -> dict[str, Any]:
        """A comment as if ``user`` (by default someone else) had posted it."""
        self.next_id += 1
        c = {
            "id": self.next_id,
            "body": body,
            "user": {"login": user},
            "html_url": f"https://github.example/{repo}/pull/{pr}#issuecomment-{self.next_id}",
        }
        self.comments.setdefault((repo, pr), []).append(c)
        return c

    def calls(self, method: str | None = None) -> list[str]:
        """Logged 'METHOD path' lines (optionally of one method)."""
        return [f"{m} {p}" for m, p, _ in self.log if method in (None, m)]


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, *args: object) -> None:  # keep pytest output clean
        pass

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def _send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        data = b"" if body is None else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _handle(self, method: str) -> None:
        gh = self.server.gh
        length = int(self.headers.get("Content-Length") or 0)
        payload = json.loads(self.rfile.read(length) or b"null")
        parts = urlsplit(self.path)
        path = parts.path.removeprefix("/api/v3")  # GitHub Enterprise layout
        with gh.lock:
            query = f"?{parts.query}" if parts.query else ""
            gh.log.append((method, path + query, time.monotonic()))
            scripted = next((s for s in gh.script if s.method in (None, method)), None)
            if scripted is not None:
                gh.script.remove(scripted)
        if scripted is not None and not scripted.then_handle:
            self._send(scripted.status, scripted.body, scripted.headers)
            return
        if self.headers.get("Authorization") != f"Bearer {gh.token}":
            # Like some proxies do: echo what was sent. perfctl must scrub it.
            self._send(401, {"message": f"Bad credentials: {self.headers.get('Authorization')}"})
            return
        status, body, headers = self._route(method, path, parse_qs(parts.query), payload)
        if scripted is not None:
            status = scripted.status
        self._send(status, body, headers)

    def _route(
        self, method: str, path: str, query: dict[str, list[str]], payload: Any
    ) -> tuple[int, Any, dict[str, str]]:
        gh = self.server.gh
        if path == "/user" and method == "GET":
            if gh.app_token:
                return 403, {"message": "Resource not accessible by integration"}, {}
            return 200, {"login": gh.login, "id": 1}, {}
        if path in ("/graphql", "/api/graphql") and method == "POST":
            if not gh.graphql:
                return 404, {"message": "Not Found"}, {}
            return 200, {"data": {"viewer": {"login": gh.login}}}, {}
        seg = path.strip("/").split("/")
        if len(seg) < 3 or seg[0] != "repos" or f"{seg[1]}/{seg[2]}" not in gh.repos:
            return 404, {"message": "Not Found"}, {}
        repo = f"{seg[1]}/{seg[2]}"
        if seg[3:4] == ["issues"] and len(seg) == 6 and seg[5] == "comments":
            pr = int(seg[4])
            if method == "GET":
                return self._page(repo, pr, query)
            if method == "POST":
                with gh.lock:
                    return 201, gh.add(payload["body"], pr, repo, user=gh.login), {}
        if seg[3:5] == ["issues", "comments"] and len(seg) == 6 and method == "PATCH":
            for items in gh.comments.values():
                for c in items:
                    if c["id"] == int(seg[5]):
                        c["body"] = payload["body"]
                        return 200, c, {}
            return 404, {"message": "Not Found"}, {}
        return 404, {"message": "Not Found"}, {}

    def _page(
        self, repo: str, pr: int, query: dict[str, list[str]]
    ) -> tuple[int, Any, dict[str, str]]:
        gh = self.server.gh
        page = int(query.get("page", ["1"])[0])
        size = min(int(query.get("per_page", ["30"])[0]), gh.page_size)
        items = gh.comments.get((repo, pr), [])
        chunk = items[(page - 1) * size : page * size]
        headers = {}
        if page * size < len(items):
            nxt = f"{gh.url}/repos/{repo}/issues/{pr}/comments?per_page={size}&page={page + 1}"
            headers["Link"] = f'<{nxt}>; rel="next"'
        return 200, chunk, headers


class _Server(ThreadingHTTPServer):
    gh: FakeGitHub


@contextlib.contextmanager
def serve_fake_github() -> Iterator[FakeGitHub]:
    """A GitHub REST look-alike on 127.0.0.1 (random port), in a thread."""
    server = _Server(("127.0.0.1", 0), _Handler)
    server.gh = FakeGitHub()
    server.gh.url = f"http://127.0.0.1:{server.server_address[1]}"
    # A short poll: shutdown() waits up to one poll interval (0.5 s by default), and
    # some ninety tests start and stop this server.
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    try:
        yield server.gh
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def fake_github() -> Iterator[FakeGitHub]:
    """The local fake GitHub, for one test."""
    with serve_fake_github() as gh:
        yield gh


def gh_env(gh: FakeGitHub, **extra: str) -> dict[str, str]:
    """Environment for a CLI subprocess talking to the fake server."""
    env = {
        "GITHUB_TOKEN": TOKEN,
        "GITHUB_API_URL": gh.url,
        "PERFCTL_GITHUB_BACKOFF": "0.05",
        "PERFCTL_GITHUB_MAX_WAIT": "10",
        "GITHUB_EVENT_PATH": "",
        "GITHUB_REPOSITORY": "",
    }
    env.update(extra)
    return env


def client(
    gh: FakeGitHub, sleeps: list[float] | None = None, max_wait: float = 10, token: str = TOKEN
) -> GitHub:
    """A GitHub client whose sleeps are recorded (and really slept, briefly)."""

    def sleep(s: float) -> None:
        if sleeps is not None:
            sleeps.append(s)
        time.sleep(min(s, 0.05))

    return GitHub(token, gh.url, RetryPolicy(max_wait_s=max_wait, backoff_s=0.05), sleep=sleep)


TARGET = Target("octo", "app", 7)


# -- client: create, update in place, pagination -----------------------------------------
def test_create_then_update_in_place_leaves_exactly_one_comment(fake_github: FakeGitHub) -> None:
    for i in range(5):
        fake_github.add(f"human comment {i}")
    results = []
    with client(fake_github) as gh:
        for run in range(3):
            results.append(upsert_comment(gh, TARGET, f"{MARK}\nrun {run}", MARK))
    assert [r.action for r in results] == ["created", "updated", "updated"]
    assert len({r.comment_id for r in results}) == 1
    mine = [b for b in fake_github.bodies() if b.startswith(MARK)]
    assert mine == [f"{MARK}\nrun 2"]
    assert len(fake_github.calls("POST")) == 1 and len(fake_github.calls("PATCH")) == 2
    # 5 + 1 comments at 2 per page: listings followed the Link header to page 3.
    assert any(line.endswith("&page=3") for line in fake_github.calls("GET"))


def test_same_body_is_not_patched_again(fake_github: FakeGitHub) -> None:
    with client(fake_github) as gh:
        upsert_comment(gh, TARGET, f"{MARK}\nsame", MARK)
        again = upsert_comment(gh, TARGET, f"{MARK}\nsame", MARK)
    assert again.action == "unchanged" and not fake_github.calls("PATCH")


def test_marker_must_be_the_first_line(fake_github: FakeGitHub) -> None:
    fake_github.add(f"> quoting the bot:\n{MARK}\nold")
    fake_github.add("<!-- perfctl:comment:gpu -->\nother suite")
    with client(fake_github) as gh:
        assert upsert_comment(gh, TARGET, f"{MARK}\nnew", MARK).action == "created"
    assert len(fake_github.bodies()) == 3


# -- client: only perfctl's own marked comment is ever updated -------------------------------
def test_a_marked_comment_by_someone_else_is_never_patched(fake_github: FakeGitHub) -> None:
    attacker = fake_github.add(f"{MARK}\nfake: all green", user="mallory")
    with client(fake_github) as gh:
        first = upsert_comment(gh, TARGET, f"{MARK}\nrun 1", MARK)
        second = upsert_comment(gh, TARGET, f"{MARK}\nrun 2", MARK)
    assert (first.action, second.action) == ("created", "updated")
    assert first.comment_id != attacker["id"] and second.comment_id == first.comment_id
    assert attacker["body"] == f"{MARK}\nfake: all green"
    assert not any(str(attacker["id"]) in line for line in fake_github.calls("PATCH"))
    assert fake_github.calls("GET").count("GET /user") == 1  # asked once per client


def test_only_on_change_does_not_refresh_someone_elses_comment(fake_github: FakeGitHub) -> None:
    fake_github.add(f"{MARK}\nregression!", user="mallory")
    with client(fake_github) as gh:
        assert upsert_comment(gh, TARGET, f"{MARK}\nx", MARK, create=False).action == "skipped"
    assert not fake_github.calls("PATCH") and not fake_github.calls("POST")


def test_identity_is_not_asked_when_no_comment_is_marked(fake_github: FakeGitHub) -> None:
    fake_github.add("LGTM")
    with client(fake_github) as gh:
        upsert_comment(gh, TARGET, f"{MARK}\nx", MARK)
    assert "GET /user" not in fake_github.calls()


def test_an_app_token_is_identified_by_graphql_viewer(fake_github: FakeGitHub) -> None:
    fake_github.app_token, fake_github.login = True, "perf-app[bot]"
    fake_github.add(f"{MARK}\nfake", user="mallory")
    ours = fake_github.add(f"{MARK}\nold", user="perf-app[bot]")
    with client(fake_github) as gh:
        result = upsert_comment(gh, TARGET, f"{MARK}\nnew", MARK)
        assert gh.identity() == "perf-app[bot]"
    assert (result.action, result.comment_id) == ("updated", ours["id"])
    assert fake_github.bodies() == [f"{MARK}\nfake", f"{MARK}\nnew"]
    assert "POST /graphql" in fake_github.calls()


def test_an_actions_token_without_graphql_is_github_actions_bot(fake_github: FakeGitHub) -> None:
    fake_github.app_token, fake_github.graphql = True, False
    ours = fake_github.add(f"{MARK}\nold", user="github-actions[bot]")
    with client(fake_github) as gh:
        result = upsert_comment(gh, TARGET, f"{MARK}\nnew", MARK)
    assert (result.action, result.comment_id) == ("updated", ours["id"])


def test_only_on_change_style_update_never_creates(fake_github: FakeGitHub) -> None:
    with client(fake_github) as gh:
        assert upsert_comment(gh, TARGET, f"{MARK}\nx", MARK, create=False).action == "skipped"
    assert fake_github.bodies() == [] and not fake_github.calls("POST")


# -- client: retries ------------------------------------------------------------------------
def test_retries_502_with_exponential_backoff(fake_github: FakeGitHub) -> None:
    fake_github.script += [Scripted(502, method="GET"), Scripted(502, method="GET")]
    sleeps: list[float] = []
    with client(fake_github, sleeps) as gh:
        assert upsert_comment(gh, TARGET, f"{MARK}\nok", MARK).action == "created"
    assert sleeps == [0.05, 0.1]
    assert fake_github.bodies() == [f"{MARK}\nok"]


def test_429_waits_as_long_as_retry_after_says(fake_github: FakeGitHub) -> None:
    fake_github.script.append(Scripted(429, {"Retry-After": "3"}, {"message": "slow down"}))
    sleeps: list[float] = []
    with client(fake_github, sleeps) as gh:
        upsert_comment(gh, TARGET, f"{MARK}\nok", MARK)
    assert sleeps == [3.0]


def test_403_with_no_remaining_quota_waits_for_the_reset(fake_github: FakeGitHub) -> None:
    reset = int(time.time()) + 4
    fake_github.script.append(
        Scripted(
            403,
            {"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(reset)},
            {"message": "API rate limit exceeded"},
        )
    )
    sleeps: list[float] = []
    with client(fake_github, sleeps) as gh:
        upsert_comment(gh, TARGET, f"{MARK}\nok", MARK)
    assert len(sleeps) == 1 and 2.0 <= sleeps[0] <= 4.0
    assert len(fake_github.bodies()) == 1


def test_rate_limit_beyond_the_budget_fails_fast(fake_github: FakeGitHub) -> None:
    fake_github.script.append(Scripted(429, {"Retry-After": "3600"}))
    sleeps: list[float] = []
    with client(fake_github, sleeps, max_wait=5) as gh, pytest.raises(PublishError) as err:
        upsert_comment(gh, TARGET, f"{MARK}\nok", MARK)
    assert sleeps == []  # fails at once: no wait toward the 3,600 s the server asked for
    assert err.value.message == (
        "GitHub rate limit exceeded (429 Too Many Requests); it lifts "
        "in 3600 s, beyond the 5 s wait budget"
    )
    assert "PERFCTL_GITHUB_MAX_WAIT" in err.value.hint


def test_5xx_forever_gives_up_within_the_total_budget(fake_github: FakeGitHub) -> None:
    fake_github.script += [Scripted(503) for _ in range(100)]
    started = time.monotonic()
    with (
        GitHub(TOKEN, fake_github.url, RetryPolicy(max_wait_s=0.6, backoff_s=0.05)) as gh,
        pytest.raises(PublishError) as err,
    ):
        gh.list_comments(TARGET)
    elapsed = time.monotonic() - started
    assert 0.3 < elapsed < 5  # the 0.6 s budget, not 100 retries' backoff
    assert err.value.message.startswith("the GitHub API still fails after ")
    assert err.value.message.endswith("(last: 503 Service Unavailable)")
    assert "githubstatus.com" in err.value.hint


def test_network_errors_are_retried_then_reported() -> None:
    with (
        GitHub(TOKEN, "http://127.0.0.1:9", RetryPolicy(max_wait_s=0.3, backoff_s=0.05)) as gh,
        pytest.raises(PublishError) as err,
    ):
        gh.list_comments(TARGET)
    assert "(last: ConnectError" in err.value.message
    assert TOKEN not in err.value.message


def test_a_502_on_post_that_created_the_comment_does_not_duplicate_it(
    fake_github: FakeGitHub,
) -> None:
    fake_github.script.append(Scripted(502, method="POST", then_handle=True))
    with client(fake_github) as gh:
        result = upsert_comment(gh, TARGET, f"{MARK}\nonce", MARK)
    assert result.action == "created"
    assert fake_github.bodies() == [f"{MARK}\nonce"]
    assert len(fake_github.calls("POST")) == 1


def test_next_page_links_to_another_host_are_refused(fake_github: FakeGitHub) -> None:
    fake_github.script.append(
        Scripted(200, {"Link": '<https://evil.example/x>; rel="next"'}, [], method="GET")
    )
    with client(fake_github) as gh, pytest.raises(PublishError, match="another host"):
        gh.list_comments(TARGET)


def test_retry_delay_rules() -> None:
    p = RetryPolicy(backoff_s=1, max_backoff_s=8)
    assert retry_delay(502, {}, 0, p, 0) == 1
    assert retry_delay(500, {}, 5, p, 0) == 8  # capped
    assert retry_delay(None, {}, 1, p, 0) == 2  # network error
    assert retry_delay(429, {}, 0, p, 0) == 1
    assert retry_delay(403, {"retry-after": "7"}, 0, p, 0) == 7  # secondary rate limit
    assert (
        retry_delay(403, {"x-ratelimit-remaining": "0", "x-ratelimit-reset": "110"}, 0, p, 100.0)
        == 10
    )
    assert retry_delay(429, {"retry-after": "Thu, 01 Jan 1970 00:01:40 GMT"}, 0, p, 90.0) == 10
    for final in (400, 401, 403, 404, 422):
        assert retry_delay(final, {}, 0, p, 0) is None


def test_environment_parsing() -> None:
    assert token_from_env({"GITHUB_TOKEN": f" {TOKEN}\n"}) == TOKEN
    assert token_from_env({"GITHUB_TOKEN": ""}) is None
    with pytest.raises(UsageError) as err:
        token_from_env({"GITHUB_TOKEN": "two words"})
    assert "two words" not in err.value.message + err.value.hint
    assert policy_from_env({"PERFCTL_GITHUB_MAX_WAIT": "5"}).max_wait_s == 5
    with pytest.raises(UsageError, match="PERFCTL_GITHUB_MAX_WAIT=soon"):
        policy_from_env({"PERFCTL_GITHUB_MAX_WAIT": "soon"})
    with pytest.raises(UsageError, match="OWNER/NAME"):
        parse_target("no-slash", 1)


def test_repr_hides_the_token(fake_github: FakeGitHub) -> None:
    with client(fake_github) as gh:
        assert TOKEN not in repr(gh) and TOKEN not in str(vars(gh).get("policy"))


# -- the CLI --------------------------------------------------------------------------------
@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project with one stored comparison (a regression) and one with no change."""
    from perfctl.store.local import open_store

    root = tmp_path / "proj"
    root.mkdir()
    (root / "pyproject.toml").write_text('[project]\nname = "p"\nversion = "0"\n')
    store = open_store(root / ".perfctl")
    store.save_comparison(
        comparison(
            [regime("quiet", NO_CHANGE)], id="20260101T000000-000001", created="2026-01-01T00:00:00"
        )
    )
    store.save_comparison(
        comparison(
            [regime("hot", REGRESSED, change=0.3), regime("cold", IMPROVED, change=-0.2)],
            id="20260102T000000-000002",
            created="2026-01-02T00:00:00",
        )
    )
    return root


def comment_cli(root: Path, gh: FakeGitHub, *args: str, **env: str):
    return run_cli(
        "comment", "--repo", REPO, "--pr", "7", *args, cwd=root, env=gh_env(gh, **env), timeout=60
    )


def test_cli_three_runs_leave_one_comment(project: Path, fake_github: FakeGitHub) -> None:
    fake_github.add("LGTM")
    outs = [comment_cli(project, fake_github) for _ in range(2)]
    outs.append(comment_cli(project, fake_github, "--comparison", "20260101"))
    assert [o.returncode for o in outs] == [0, 0, 0], outs[-1].stderr
    assert "Comment created on octo/app#7: https://github.example/" in outs[0].stderr
    assert "Comment unchanged on octo/app#7" in outs[1].stderr
    assert "Comment updated on octo/app#7" in outs[2].stderr
    bodies = fake_github.bodies()
    assert len(bodies) == 2 and bodies[0] == "LGTM"
    assert bodies[1].startswith(MARK + "\n### ➖ No significant change")


def test_cli_dry_run_prints_the_body_and_posts_nothing(
    project: Path, fake_github: FakeGitHub
) -> None:
    out = run_cli(
        "comment",
        "--dry-run",
        "--last",
        cwd=project,
        env={"GITHUB_TOKEN": "", "GITHUB_EVENT_PATH": ""},
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(MARK + "\n### ❌ 1 regression, 1 improvement\n")
    assert out.stderr == "" and fake_github.log == []


def test_cli_only_on_change(project: Path, fake_github: FakeGitHub) -> None:
    quiet = ("--comparison", "20260101", "--only-on-change")
    out = comment_cli(project, fake_github, *quiet)
    assert out.returncode == 0
    assert "nothing posted (--only-on-change)" in out.stderr
    assert fake_github.bodies() == [] and not fake_github.calls("POST")
    # A regression is posted; then "no change" updates that comment rather than leaving it.
    assert comment_cli(project, fake_github, "--only-on-change").returncode == 0
    assert "❌ 1 regression" in fake_github.bodies()[0]
    out = comment_cli(project, fake_github, *quiet)
    assert "Comment updated" in out.stderr
    assert len(fake_github.bodies()) == 1 and "No significant change" in fake_github.bodies()[0]


def test_cli_retries_through_502_and_rate_limits(project: Path, fake_github: FakeGitHub) -> None:
    fake_github.script += [
        Scripted(502, method="GET"),
        Scripted(429, {"Retry-After": "1"}, method="GET"),
        Scripted(
            403,
            {"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(int(time.time()))},
            method="POST",
        ),
    ]
    out = comment_cli(project, fake_github)
    assert out.returncode == 0, out.stderr
    assert len(fake_github.bodies()) == 1
    times = [t for _, _, t in fake_github.log]
    assert times[2] - times[1] >= 0.9  # retry-after: 1 was respected


def test_cli_gives_up_on_persistent_5xx(project: Path, fake_github: FakeGitHub) -> None:
    fake_github.script += [Scripted(502) for _ in range(50)]
    out = comment_cli(project, fake_github, PERFCTL_GITHUB_MAX_WAIT="0.5")
    assert out.returncode == 3
    assert out.stderr.startswith("Error: the GitHub API still fails after ")
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize(
    ("status", "error", "hint"),
    [
        (
            401,
            "Error: GitHub rejected the token: 401 Unauthorized "
            "(GET /repos/octo/app/issues/7/comments)",
            "Hint: set GITHUB_TOKEN to a valid token; in GitHub Actions add "
            "`GITHUB_TOKEN: ${{ secrets.GITHUB_TOKEN }}` to the step's env",
        ),
        (
            403,
            "Error: GitHub refused the request: 403 Forbidden "
            "(GET /repos/octo/app/issues/7/comments): Resource not accessible by integration",
            "Hint: the token needs `pull-requests: write` and `issues: write` permissions; "
            "pull requests from forks only get a read-only token, so post from a "
            "`workflow_run` workflow (see `perfctl init --ci github`)",
        ),
        (
            404,
            "Error: GitHub answered 404 Not Found for GET /repos/octo/app/issues/7/comments",
            "Hint: check --repo OWNER/NAME and --pr N; a token that cannot see a private "
            "repository also gets 404",
        ),
    ],
)
def test_cli_auth_errors(
    project: Path, fake_github: FakeGitHub, status: int, error: str, hint: str
) -> None:
    fake_github.script.append(
        Scripted(status, {}, {"message": "Resource not accessible by integration"})
    )
    out = comment_cli(project, fake_github)
    assert out.returncode == 3
    assert out.stderr == f"{error}\n{hint}\n"
    assert out.stdout == ""


def test_cli_unknown_repo_is_a_real_404(project: Path, fake_github: FakeGitHub) -> None:
    out = run_cli(
        "comment",
        "--repo",
        "octo/nope",
        "--pr",
        "7",
        cwd=project,
        env=gh_env(fake_github),
        timeout=60,
    )
    assert out.returncode == 3
    assert (
        "Error: GitHub answered 404 Not Found for GET /repos/octo/nope/issues/7/comments"
        in out.stderr
    )


def test_cli_missing_token(project: Path, fake_github: FakeGitHub) -> None:
    out = comment_cli(project, fake_github, GITHUB_TOKEN="")
    assert out.returncode == 2
    assert out.stderr.startswith(
        "Error: GITHUB_TOKEN is not set, so the comment cannot be posted\nHint: export a token"
    )
    assert fake_github.log == []


def test_cli_token_never_leaks(project: Path, fake_github: FakeGitHub, tmp_path: Path) -> None:
    outputs = [comment_cli(project, fake_github, "--dry-run"), comment_cli(project, fake_github)]
    # An answer that echoes the token back (as a misbehaving proxy might) is scrubbed.
    fake_github.script.append(Scripted(403, {}, {"message": f"token {TOKEN} lacks scope"}))
    outputs.append(comment_cli(project, fake_github))
    assert outputs[-1].returncode == 3 and "token *** lacks scope" in outputs[-1].stderr
    fake_github.token = "ghp_other"  # a wrong token: 401
    outputs.append(comment_cli(project, fake_github))
    assert outputs[-1].returncode == 3
    fake_github.script += [Scripted(502) for _ in range(50)]
    outputs.append(comment_cli(project, fake_github, PERFCTL_GITHUB_MAX_WAIT="0.2"))
    for out in outputs:
        assert TOKEN not in out.stdout and TOKEN not in out.stderr
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert TOKEN.encode() not in path.read_bytes(), path
    assert all(TOKEN not in c["body"] for items in fake_github.comments.values() for c in items)


def test_cli_github_enterprise_api_prefix(project: Path, fake_github: FakeGitHub) -> None:
    out = comment_cli(project, fake_github, GITHUB_API_URL=fake_github.url + "/api/v3")
    assert out.returncode == 0, out.stderr
    assert len(fake_github.bodies()) == 1


def test_cli_body_file_and_comparison_file(
    project: Path, fake_github: FakeGitHub, tmp_path: Path
) -> None:
    body = tmp_path / "body.md"
    body.write_text("hello from a file\n")
    out = comment_cli(project, fake_github, "--body-file", str(body))
    assert out.returncode == 0, out.stderr
    assert fake_github.bodies() == [f"{MARK}\nhello from a file\n"]
    from perfctl.model import to_dict

    cfile = tmp_path / "comparison.json"
    cfile.write_text(json.dumps(to_dict(comparison([regime("x<y>", REGRESSED, change=0.5)]))))
    out = comment_cli(project, fake_github, "--comparison-file", str(cfile))
    assert out.returncode == 0, out.stderr
    assert fake_github.bodies()[0].startswith(f"{MARK}\n### ❌ 1 regression")
    assert "| x&lt;y&gt; |" in fake_github.bodies()[0]
    cfile.write_text('{"regimes": "nope"}')
    out = comment_cli(project, fake_github, "--comparison-file", str(cfile))
    assert out.returncode == 2
    assert out.stderr.startswith(f"Error: {cfile}: missing field `id`\n")


def test_cli_usage_errors(project: Path, fake_github: FakeGitHub, tmp_path: Path) -> None:
    out = comment_cli(project, fake_github, "--last", "--comparison", "x")
    assert out.returncode == 2 and "exclude each other" in out.stderr
    out = run_cli("comment", cwd=project, env=gh_env(fake_github))
    assert out.returncode == 2
    assert out.stderr.startswith("Error: no pull request to comment on\n")
    out = comment_cli(project, fake_github, "--marker-id", "a b")
    assert out.returncode == 2 and "invalid --marker-id" in out.stderr
    out = run_cli("comment", "--repo", "bad", "--pr", "1", cwd=project, env=gh_env(fake_github))
    assert out.returncode == 2 and "is not of the form OWNER/NAME" in out.stderr
    huge = tmp_path / "huge.md"
    huge.write_text("x" * 70_000)
    out = comment_cli(project, fake_github, "--body-file", str(huge))
    assert out.returncode == 2 and "GitHub accepts 65,536" in out.stderr
    assert fake_github.log == []


def test_cli_body_file_reads_are_capped(project: Path, fake_github: FakeGitHub) -> None:
    out = comment_cli(project, fake_github, "--body-file", "/dev/zero")
    assert out.returncode == 2, out.stderr
    assert (
        "Error: /dev/zero holds over 262,1" in out.stderr and "GitHub accepts 65,536" in out.stderr
    )
    assert "Hint:" in out.stderr and fake_github.log == []


def test_a_non_integer_comment_id_is_a_publish_error(fake_github: FakeGitHub) -> None:
    ours = fake_github.add(f"{MARK}\nold", user=fake_github.login)
    ours["id"] = "12; DROP"
    with client(fake_github) as gh, pytest.raises(PublishError, match="invalid id"):
        upsert_comment(gh, TARGET, f"{MARK}\nnew", MARK)
    assert fake_github.calls("PATCH") == []


def test_cli_creates_its_own_comment_next_to_an_attackers(
    project: Path, fake_github: FakeGitHub
) -> None:
    attacker = fake_github.add(f"{MARK}\n### ✅ all good, merge it", user="mallory")
    out = comment_cli(project, fake_github)
    assert out.returncode == 0, out.stderr
    assert "Comment created on octo/app#7" in out.stderr
    assert attacker["body"] == f"{MARK}\n### ✅ all good, merge it"
    assert fake_github.calls("PATCH") == []
    assert fake_github.bodies()[1].startswith(f"{MARK}\n### ❌ 1 regression")


def test_cli_marker_ids_keep_suites_apart(project: Path, fake_github: FakeGitHub) -> None:
    for suite in ("", "gpu", "gpu", ""):
        args = ("--marker-id", suite) if suite else ()
        assert comment_cli(project, fake_github, *args).returncode == 0
    firsts = sorted(b.split("\n", 1)[0] for b in fake_github.bodies())
    assert firsts == [MARK, "<!-- perfctl:comment:gpu -->"]


def test_cli_pr_from_the_actions_event(
    project: Path, fake_github: FakeGitHub, tmp_path: Path
) -> None:
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"pull_request": {"number": 9}, "repository": {"full_name": REPO}}))
    out = run_cli(
        "comment", cwd=project, env=gh_env(fake_github, GITHUB_EVENT_PATH=str(event)), timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert len(fake_github.bodies(pr=9)) == 1
