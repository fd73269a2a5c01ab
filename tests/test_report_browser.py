"""HTML reports in real headless Chromium, loaded from disk with no network.

Chromium is driven over the DevTools protocol on ``--remote-debugging-pipe``
(fds 3 and 4, NUL-terminated JSON), so no websocket client is needed. Each
test checks: no console errors or exceptions, no request leaves file:/data:,
every chart div holds a rendered plotly ``.main-svg``, and a full-page
screenshot is saved (to $PERFCTL_TEST_ARTIFACTS, else pytest's tmp dir).
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import queue
import random
import re
import shutil
import subprocess
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from perfctl.model import IMPROVED, REGRESSED
from perfctl.render.html_report import render_comparison, render_history
from tests.test_report import XSS, make_comparison, make_regime, make_runs, write_profile

CHROMIUM = "/usr/bin/chromium"
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1280,900",
    "--hide-scrollbars",
    # Belt and braces for "no network": any http(s) request goes to a dead proxy.
    "--proxy-server=http://127.0.0.1:9",
    "--proxy-bypass-list=<-loopback>",
)
LOCAL_SCHEMES = ("file:", "data:", "about:", "blob:", "chrome-error:")

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not os.access(CHROMIUM, os.X_OK), reason=f"{CHROMIUM} not found (apt-get install chromium)"
    ),
]


def _high(fd: int) -> int:
    # Park the pipe end above fd 10 so dup2 onto 3/4 in the child never
    # clobbers its partner or no-ops on an fd that is still close-on-exec.
    new = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return new


class Browser:
    """A headless Chromium with one page, spoken to over the DevTools pipe."""

    def __init__(self, profile: Path) -> None:
        cmd_r, self._cmd_w = (_high(fd) for fd in os.pipe())
        self._out_r, out_w = (_high(fd) for fd in os.pipe())

        def plumb() -> None:
            os.dup2(cmd_r, 3)
            os.dup2(out_w, 4)

        self.proc = subprocess.Popen(  # noqa: S603 - fixed argv
            [
                CHROMIUM,
                *FLAGS,
                f"--user-data-dir={profile}",
                "--remote-debugging-pipe",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            close_fds=False,
            preexec_fn=plumb,
        )
        os.close(cmd_r)
        os.close(out_w)
        self._next = 0
        self._replies: dict[int, dict[str, Any]] = {}
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        self._cond = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)[
            "sessionId"
        ]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(f"{domain}.enable", session=True)

    def _read(self) -> None:
        buf = b""
        while chunk := os.read(self._out_r, 1 << 16):
            buf += chunk
            *messages, buf = buf.split(b"\0")
            for raw in messages:
                msg = json.loads(raw)
                if "id" in msg:
                    with self._cond:
                        self._replies[msg["id"]] = msg
                        self._cond.notify_all()
                else:
                    self.events.put(msg)

    def call(
        self, method: str, *, session: bool = False, timeout: float = 30, **params: Any
    ) -> dict[str, Any]:
        """Send one command and wait for its result."""
        self._next += 1
        msg: dict[str, Any] = {"id": self._next, "method": method, "params": params}
        if session:
            msg["sessionId"] = self.session
        os.write(self._cmd_w, json.dumps(msg).encode() + b"\0")
        with self._cond:
            if not self._cond.wait_for(lambda: self._next in self._replies, timeout):
                raise TimeoutError(f"{method}: no reply in {timeout}s")
            reply = self._replies.pop(self._next)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    def evaluate(self, expression: str) -> Any:
        """The JSON value of a JS expression in the page."""
        result = self.call(
            "Runtime.evaluate",
            session=True,
            expression=expression,
            returnByValue=True,
            awaitPromise=True,
        )
        if "exceptionDetails" in result:
            raise RuntimeError(f"JS error: {result['exceptionDetails']}")
        return result["result"].get("value")

    def drain(self) -> list[dict[str, Any]]:
        """Every event received so far."""
        out = []
        while not self.events.empty():
            out.append(self.events.get_nowait())
        return out

    def close(self) -> None:
        """Close the browser (kill it if it hangs)."""
        try:
            self.call("Browser.close", timeout=5)
        except (OSError, TimeoutError, RuntimeError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._cmd_w)


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One Chromium for the module, with a fresh profile."""
    b = Browser(tmp_path_factory.mktemp("chromium-profile"))
    yield b
    b.close()


@pytest.fixture(scope="module")
def _site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("site")


# Where every test writes the report it opens (under its fresh ``root``).
PAGE = "reports/page.html"


@pytest.fixture
def root(_site: Path) -> Path:
    """A fresh, empty project root at the same path for every test of the module.

    Every report is then opened at one URL, and V8 keeps the inline plotly.js it
    compiled for that URL: about 0.6 s a page instead of 1.7 s on the 2-core VM.
    The page itself is read from disk anew each time (each test checks its content).
    """
    root = _site / "proj"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir()
    return root


def _problems(events: list[dict[str, Any]]) -> list[str]:
    out = []
    for e in events:
        method, p = e.get("method"), e.get("params", {})
        if method == "Runtime.exceptionThrown":
            out.append(
                f"exception: {p['exceptionDetails'].get('text')} "
                f"{p['exceptionDetails'].get('exception', {}).get('description', '')}"
            )
        elif method == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            out.append(
                "console: "
                + " ".join(str(a.get("value", a.get("description"))) for a in p.get("args", []))
            )
        elif method == "Log.entryAdded" and p["entry"].get("level") == "error":
            out.append(f"log: {p['entry'].get('text')} {p['entry'].get('url', '')}")
        elif method == "Page.javascriptDialogOpening":
            out.append(f"dialog: {p.get('message')}")
        elif method == "Network.requestWillBeSent" and not p["request"]["url"].startswith(
            LOCAL_SCHEMES
        ):
            out.append(f"network: {p['request']['url']}")
    return out


def _artifacts_dir(tmp_path: Path) -> Path:
    d = Path(os.environ.get("PERFCTL_TEST_ARTIFACTS") or tmp_path / "artifacts")
    d.mkdir(parents=True, exist_ok=True)
    return d


def load(browser: Browser, html: Path, shot: Path, timeout: float = 30) -> dict[str, Any]:
    """Open a report from disk, wait for every chart, screenshot it; return what was seen."""
    browser.drain()
    # Every test opens the same URL: the page polled below must be a new document.
    before = browser.evaluate("performance.timeOrigin")
    browser.call("Page.navigate", session=True, url=html.resolve().as_uri())
    deadline = time.monotonic() + timeout
    state: dict[str, Any] = {}
    while time.monotonic() < deadline:
        state = (
            browser.evaluate("""(() => {
            const charts = [...document.querySelectorAll('.chart')];
            return {ready: document.readyState,
                    charts: charts.length,
                    rendered: charts.filter(d => d.querySelector('.main-svg')).length,
                    // A chart the page gave up on (no plotly.js) is settled, too.
                    missing: charts.filter(d => d.classList.contains('chart-missing')).length,
                    pwned: window.__pwned === undefined ? null : window.__pwned,
                    origin: performance.timeOrigin};
        })()""")
            or {}
        )
        settled = state.get("rendered", 0) + state.get("missing", 0)
        new = state.get("origin", 0) > before
        if new and state.get("ready") == "complete" and settled == state["charts"]:
            break
        time.sleep(0.1)
    assert state.get("origin", 0) > before, f"{html.name} never replaced the page before it"
    events = browser.drain()
    # Dismiss any dialog so the page (and the next test) is not stuck.
    if any(e.get("method") == "Page.javascriptDialogOpening" for e in events):
        browser.call("Page.handleJavaScriptDialog", session=True, accept=False)
    metrics = browser.call("Page.getLayoutMetrics", session=True)["cssContentSize"]
    png = browser.call(
        "Page.captureScreenshot",
        session=True,
        format="png",
        captureBeyondViewport=True,
        clip={
            "x": 0,
            "y": 0,
            "width": metrics["width"],
            "height": min(metrics["height"], 16000),
            "scale": 1,
        },
    )
    shot.write_bytes(base64.b64decode(png["data"]))
    print(f"screenshot: {shot}")
    state["problems"] = _problems(events)
    return state


def _check_rendered(state: dict[str, Any], charts: int) -> None:
    assert state["problems"] == []
    assert state["charts"] == charts
    assert state["rendered"] == charts, "some chart divs hold no plotly .main-svg"


def test_comparison_with_profile(browser: Browser, root: Path, tmp_path: Path) -> None:
    c = make_comparison(artifacts=write_profile(root))
    out = render_comparison(c, project_root=root, out=root / PAGE)
    state = load(browser, out, _artifacts_dir(tmp_path) / "comparison-profile.png")
    _check_rendered(state, charts=5)  # 2 bars, 2 distributions, 1 profile waterfall
    # The flamegraphs open in the page.
    opened = browser.evaluate("""(() => {
        document.querySelectorAll('details.flame').forEach(d => d.open = true);
        return [...document.querySelectorAll('object.flamegraph')]
            .map(o => o.getBoundingClientRect().height > 100);
    })()""")
    assert opened == [True, True, True]
    # One table row per profiled regime; its "view" links open the flame graph in the page.
    viewed = browser.evaluate("""(() => {
        document.querySelectorAll('details.flame').forEach(d => d.open = false);
        const rows = document.querySelectorAll('#flamegraph-table tbody tr').length;
        document.querySelector('#flamegraph-table a.view').click();
        return {rows, open: [...document.querySelectorAll('details.flame')].map(d => d.open)};
    })()""")
    assert viewed == {"rows": 1, "open": [True, False, False]}


def test_comparison_without_profile_sorts_and_filters(
    browser: Browser, root: Path, tmp_path: Path
) -> None:
    out = render_comparison(make_comparison(families=3), project_root=root, out=root / PAGE)
    state = load(browser, out, _artifacts_dir(tmp_path) / "comparison.png")
    _check_rendered(state, charts=7)  # 3 bars, 3 distributions, 1 per-regime change chart
    drawn = browser.evaluate("""(() => {
        const chart = document.querySelector('#chart-changes');
        return {points: chart.querySelectorAll('.scatterlayer .point').length,
                whiskers: chart.querySelectorAll('.errorbar').length,
                ticks: [...chart.querySelectorAll('.xtick text')].map(t => t.textContent),
                bars: chart.querySelectorAll('.waterfalllayer .point').length};
    })()""")
    # 9 of the 10 regimes have a stored change (not the failed one): dot, whisker, % axis.
    assert (drawn["points"], drawn["whiskers"], drawn["bars"]) == (9, 9, 0)
    assert drawn["ticks"] and all(t.endswith("%") for t in drawn["ticks"])
    seen = browser.evaluate("""(() => {
        const rows = () => [...document.querySelectorAll('#results-table tbody tr')];
        const visible = () => rows().filter(r => !r.hidden).length;
        const out = {first: rows()[0].dataset.verdict};
        document.querySelector('#verdict-counts button[data-verdict="improved"]').click();
        out.improved = visible();
        document.querySelector('#verdict-counts button[data-verdict="improved"]').click();
        const box = document.querySelector('.filter-text');
        box.value = 'fam2'; box.dispatchEvent(new Event('input', {bubbles: true}));
        out.fam2 = visible();
        box.value = ''; box.dispatchEvent(new Event('input', {bubbles: true}));
        const base = document.querySelectorAll('#results-table th')[2];
        base.click();
        out.sorted = rows().map(r => r.cells[2].dataset.sort).filter(v => v).map(Number);
        out.count = document.querySelector('.filter-count').textContent;
        return out;
    })()""")
    assert seen["first"] == "regressed"
    assert seen["improved"] == 2
    assert seen["fam2"] == 3
    assert seen["sorted"] == sorted(seen["sorted"]) and len(seen["sorted"]) == 9
    assert seen["count"] == "10 of 10 shown"


def test_history(browser: Browser, root: Path, tmp_path: Path) -> None:
    out = render_history(make_runs(30, 4), out=root / PAGE)
    state = load(browser, out, _artifacts_dir(tmp_path) / "history.png")
    _check_rendered(state, charts=4)


def test_payloads_stay_text(browser: Browser, root: Path, tmp_path: Path) -> None:
    c = make_comparison(text=XSS, artifacts=write_profile(root, text=XSS))
    out = render_comparison(c, project_root=root, out=root / PAGE)
    shots = _artifacts_dir(tmp_path)
    state = load(browser, out, shots / "comparison-xss.png")
    _check_rendered(state, charts=5)
    assert state["pwned"] is None
    text = browser.evaluate("document.body.innerText")
    assert XSS in text  # shown literally: ref, subject, regime, docstring, warning...
    assert text.count(XSS) >= 5
    labels = browser.evaluate(
        "[...document.querySelectorAll('.chart .main-svg text')].map(t => t.textContent)"
        ".join('\\n')"
    )
    assert "<script>window.__pwned=1</script>" in labels  # plotly shows it as text, too
    assert browser.evaluate("document.querySelectorAll('main img, main script').length") == 0

    out = render_history(make_runs(8, 2, text=XSS), out=root / PAGE)
    state = load(browser, out, shots / "history-xss.png")
    _check_rendered(state, charts=2)
    assert state["pwned"] is None
    assert XSS in browser.evaluate("document.body.innerText")


def test_cdn_report_offline_degrades_quietly(browser: Browser, root: Path, tmp_path: Path) -> None:
    out = render_comparison(make_comparison(), project_root=root, out=root / PAGE, plotly_js="cdn")
    state = load(browser, out, _artifacts_dir(tmp_path) / "cdn-offline.png")
    # The CDN script is the only request that leaves the disk, and it fails.
    assert all(p.startswith(("network: https://cdn.plot.ly/", "log: ")) for p in state["problems"])
    assert (state["missing"], state["rendered"]) == (5, 0)
    assert browser.evaluate("document.querySelectorAll('.chart-missing').length") == 5


# Where each text line of an element starts: the character before every wrap.
_WRAPS = """((sel) => [...document.querySelectorAll(sel)].map(el => {
    const text = el.textContent, range = document.createRange(), out = [];
    const node = el.firstChild ? document.createTreeWalker(el, NodeFilter.SHOW_TEXT) : null;
    let top = null, seen = 0;
    for (let t = node && node.nextNode(); t; t = node.nextNode()) {
        for (let i = 0; i < t.length; i++, seen++) {
            range.setStart(t, i); range.setEnd(t, i + 1);
            const y = range.getClientRects()[0]?.top;
            if (top !== null && y > top + 2) { out.push(text.slice(0, seen)); }
            if (y !== undefined) { top = y; }
        }
    }
    return {text, wraps: out};
}))"""
LONG_NAMES = (
    "bytes_roundtrip_512kb[size=524288]",
    "shm.pipe_copy_large_buffers[n=1048576,mode=rw]",
)


def test_regime_names_wrap_only_between_their_parts(
    browser: Browser, root: Path, tmp_path: Path
) -> None:
    rng = random.Random(1)
    c = make_comparison(artifacts=write_profile(root))
    long = tuple(
        make_regime(rng, name, "fam0", REGRESSED, 1e-4, 1.2e-4, artifacts=write_profile(root))
        for name in LONG_NAMES
    )
    c = replace(c, regimes=(*c.regimes, *long))
    out = render_comparison(c, project_root=root, out=root / PAGE)
    browser.call("Emulation.setDeviceMetricsOverride", session=True, width=640, height=900,
                 deviceScaleFactor=1, mobile=False)  # fmt: skip
    try:
        state = load(browser, out, _artifacts_dir(tmp_path) / "comparison-narrow.png")
        seen = browser.evaluate(f"{_WRAPS}('.results .regime, .profiles .regime')")
    finally:
        browser.call("Emulation.clearDeviceMetricsOverride", session=True)
    assert state["problems"] == []
    long_seen = [s for s in seen if s["text"] in LONG_NAMES]
    assert len(long_seen) == 4  # results table and flamegraph table
    assert any(s["wraps"] for s in long_seen), "the narrow page should wrap the long names"
    for s in seen:
        for before in s["wraps"]:
            assert before[-1] in "_.[,=/", f"{s['text']!r} wraps inside a word after {before!r}"


def test_log_axis_ticks_name_their_unit_and_stacked_bars_have_a_legend(
    browser: Browser, root: Path, tmp_path: Path
) -> None:
    rng = random.Random(2)
    # One family spanning 50 ns .. 40 ms: a log axis.
    spread = tuple(
        make_regime(rng, f"span[n={i}]", "span", IMPROVED, t, t * 0.8)
        for i, t in enumerate((5e-8, 3e-6, 4e-2))
    )
    c = make_comparison(artifacts=write_profile(root))
    c = replace(c, regimes=(*c.regimes, *spread))
    out = render_comparison(c, project_root=root, out=root / PAGE)
    state = load(browser, out, _artifacts_dir(tmp_path) / "comparison-axes.png")
    _check_rendered(state, charts=7)
    seen = browser.evaluate("""(() => {
        const ticks = id => [...document.querySelectorAll(`#${id} .ytick text`)]
            .map(t => t.textContent);
        const title = id => document.querySelector(`#${id} .g-ytitle`)?.textContent;
        return {
            log: ticks('chart-bars-span'), logTitle: title('chart-bars-span'),
            dist: ticks('chart-dist-span'),
            linear: ticks('chart-waterfall-fam0-n-0'), linearTitle: title('chart-waterfall-fam0-n-0'),
            legend: [...document.querySelectorAll('#chart-waterfall-fam0-n-0 .legend .traces')]
                .map(t => t.textContent),
        };
    })()""")
    unit = re.compile(r"\d+(\.\d+)? (ns|µs|ms|s)")
    assert len(seen["log"]) >= 3 and all(unit.fullmatch(t) for t in seen["log"]), seen["log"]
    assert all(unit.fullmatch(t) for t in seen["dist"]) and seen["logTitle"] == (
        "time per op (log scale)"
    )
    # A linear axis keeps its unit in the title and plain numbers on the ticks.
    assert re.fullmatch(r"time per op \((ns|µs|ms|s)\)", seen["linearTitle"])
    assert all(re.fullmatch(r"[\d.,]+", t) for t in seen["linear"]), seen["linear"]
    assert sorted(seen["legend"]) == sorted(
        ["frames2topicmsgs", "recv_multipart", "put", "(elsewhere)"]
    )


def make_bisection(subject: str = "c5: three times the work") -> tuple[Any, list[Any]]:
    """A finished bisection of 8 commits: two skipped, culprit at 5 (verified)."""
    from perfctl.model import RefInfo
    from perfctl.stats.bisection import Bisection, Likeness, Outcome, Step, StepKind

    line = [
        RefInfo(f"c{i}", f"{i:x}" * 40, subject=subject if i == 5 else f"c{i}: docs")
        for i in range(9)
    ]
    good, bad = line[0], line[-1]

    def step(kind: StepKind, i: int, like: Likeness, change: float | None) -> Step:
        ci = {} if change is None else {"ci_low": change - 0.2, "ci_high": change + 0.2}
        base = line[4] if kind == StepKind.VERIFY else good
        return Step(kind, base, line[i], like, change=change, rounds=6, **ci)  # type: ignore[arg-type]

    steps = (
        step(StepKind.CONFIRM, 8, Likeness.BAD, 2.0),
        step(StepKind.STEP, 4, Likeness.GOOD, 0.02),
        step(StepKind.STEP, 6, Likeness.BAD, 1.9),
        step(StepKind.STEP, 5, Likeness.BAD, 2.1),
        step(StepKind.STEP, 2, Likeness.SKIPPED, None),
        step(StepKind.VERIFY, 5, Likeness.BAD, 2.0),
    )
    b = Bisection("b1", "now", "work", good, bad, 8, Outcome.CULPRIT, steps, line[5], (line[5],))
    return b, line


def test_bisection_steps_on_the_commit_axis(browser: Browser, root: Path, tmp_path: Path) -> None:
    from perfctl.render.bisect_report import render_bisection

    b, line = make_bisection(subject=XSS)
    out = render_bisection(b, line, out=root / PAGE)
    state = load(browser, out, _artifacts_dir(tmp_path) / "bisect.png")
    _check_rendered(state, charts=1)
    assert state["pwned"] is None  # the hostile commit subject stayed text
    drawn = browser.evaluate("""(() => {
        const chart = document.querySelector('.chart');
        return {ticks: [...chart.querySelectorAll('.xtick text')].map(t => t.textContent),
                whiskers: chart.querySelectorAll('.errorbar').length,
                shapes: chart.querySelectorAll('.shapelayer path').length,
                rows: document.querySelectorAll('#steps-table tbody tr').length};
    })()""")
    # Every commit of the line holds its place, measured or not, oldest first.
    assert drawn["ticks"] == [r.short for r in line]
    assert drawn["whiskers"] >= 4  # the ends and three judged steps (a skipped one has none)
    assert drawn["shapes"] == 3  # the slowdown, halfway, the culprit's span
    assert drawn["rows"] == len(b.steps)
