"""Stack samples from py-spy: parsing, normalising, and the regime's view of them.

perfctl records py-spy's speedscope JSON, where every frame is a JSON string, so
``process <pid>:"cmdline"`` frames (unescaped in collapsed text, and free to
contain ``;`` or newlines) cannot corrupt the parse. Collapsed text
(``frame;frame;... COUNT``, as ``py-spy -f raw`` writes it) is parsed too, with
care for those frames. Both become :class:`Stacks`: root-first frame tuples
weighted in *sampled seconds*.

Cleaning keeps no PIDs or thread ids: process frames are dropped, a sample of a
child process is rooted at :data:`SUBPROCESS`, and one of a non-main thread of
the worker at :data:`THREAD`. Normalising shortens file paths so that the same
function pairs up across refs (different worktrees and environments), and drops
line numbers (they move between commits).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True, order=True)
class Frame:
    """One stack frame: function name, file and (optionally) line."""

    name: str
    file: str = ""
    line: int | None = None

    @property
    def label(self) -> str:
        """``name (file)`` or ``name (file:line)``, as flamegraphs show it."""
        if not self.file:
            return self.name
        return f"{self.name} ({self.file}{'' if self.line is None else f':{self.line}'})"


Stack = tuple[Frame, ...]

# Synthetic roots replacing process and thread identity (see module docstring).
SUBPROCESS = Frame("[subprocess]")
THREAD = Frame("[thread]")
# Samples of the worker loop itself (loop overhead, or a `run` without Python frames).
LOOP = Frame("(worker loop)")
# The worker's loop function; the regime's timed callable runs directly below it.
LOOP_FUNCTION = "perfctl_profile_loop"
MARKERS = (SUBPROCESS, THREAD, LOOP)

_PROCESS = re.compile(r'process \d+:"')
_THREAD_FRAME = re.compile(r"thread \((?:0x[0-9a-fA-F]+|\d+)\)")
_PROFILE_NAME = re.compile(r'(?:Process (\d+) )?Thread (\d+|0x[0-9a-fA-F]+) "(.*)"', re.S)
_FRAME_TEXT = re.compile(r"(?P<name>.*) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)", re.S)
_RECORD = re.compile(r"(?P<stack>.*)\s(?P<count>\d+)", re.S)


@dataclass(frozen=True)
class Stacks:
    """Sampled seconds per distinct stack (root first)."""

    weights: Mapping[Stack, float] = field(default_factory=dict)

    @property
    def total_s(self) -> float:
        """All sampled seconds."""
        return sum(self.weights.values())

    def __len__(self) -> int:
        return len(self.weights)


def _accumulate(pairs: Iterable[tuple[Stack, float]]) -> Stacks:
    out: dict[Stack, float] = defaultdict(float)
    for stack, weight in pairs:
        out[stack] += weight
    return Stacks(dict(out))


def _is_process(frame: Frame) -> bool:
    return not frame.file and _PROCESS.match(frame.name) is not None


def _is_thread(frame: Frame) -> bool:
    # `thread (0x7f..)` from py-spy --threads; parse_frame reads the id as a file.
    return _THREAD_FRAME.fullmatch(frame.label) is not None


def clean(frames: Sequence[Frame], main_thread: bool = True) -> Stack:
    """Drop process/thread frames; root children and other threads at a marker."""
    processes = sum(1 for f in frames if _is_process(f))
    kept = tuple(f for f in frames if not _is_process(f) and not _is_thread(f))
    # py-spy nests a child's process frame under its parent's: two or more
    # means the sample came from a subprocess of the worker.
    if processes >= 2:
        return (SUBPROCESS, *kept)
    return kept if main_thread else (THREAD, *kept)


def is_main_thread(profile_name: str) -> bool:
    """Whether a speedscope profile (``[Process P ]Thread T "name"``) is a main thread.

    The main thread's native id equals the pid; without a pid (no
    ``--subprocesses``) only the name tells, and py-spy sometimes leaves the
    main thread's name empty, so an empty name counts as main.
    """
    m = _PROFILE_NAME.fullmatch(profile_name.strip())
    if m is None:
        return True
    pid, tid, name = m.groups()
    if pid is not None and tid.isdigit():
        return pid == tid
    return name in ("", "MainThread")


# -- speedscope ---------------------------------------------------------------


def _speedscope_frame(raw: Mapping[str, Any]) -> Frame:
    line = raw.get("line")
    return Frame(
        str(raw.get("name", "?")),
        str(raw.get("file") or ""),
        int(line) if isinstance(line, int) and line > 0 else None,
    )


def parse_speedscope(data: Mapping[str, Any]) -> Stacks:
    """Stacks of a speedscope document (all of its sampled profiles)."""
    frames = [_speedscope_frame(f) for f in data.get("shared", {}).get("frames", [])]
    pairs: list[tuple[Stack, float]] = []
    for prof in data.get("profiles", []):
        if prof.get("type") != "sampled":
            continue
        main = is_main_thread(str(prof.get("name", "")))
        samples = prof.get("samples", [])
        weights = prof.get("weights") or [1.0] * len(samples)
        for sample, weight in zip(samples, weights, strict=False):
            pairs.append((clean([frames[i] for i in sample], main), float(weight)))
    return _accumulate(pairs)


# -- collapsed ----------------------------------------------------------------


def parse_frame(text: str) -> Frame:
    """``name (file:line)``, ``name (file)`` or a bare name."""
    m = _FRAME_TEXT.fullmatch(text)
    if m is None:
        return Frame(text)
    line = m.group("line")
    return Frame(m.group("name"), m.group("file"), int(line) if line else None)


def _looks_like_frame(token: str) -> bool:
    return (
        _FRAME_TEXT.fullmatch(token) is not None
        or _PROCESS.match(token) is not None
        or _THREAD_FRAME.fullmatch(token) is not None
    )


def split_frames(stack: str) -> tuple[list[str], bool]:
    """Split ``a;b;c`` into frame texts; ``process N:"…"`` frames may contain ``;``.

    Returns the frames and whether every process frame was closed (a record
    whose command line was cut by a newline is not complete yet).
    """
    tokens = stack.split(";")
    out: list[str] = []
    closed = True
    i = 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if _PROCESS.match(token):
            # The command line is unescaped: it ends at the first `"` whose next
            # token starts another frame (or at the end of the stack).
            while not (token.endswith('"') and (i == len(tokens) or _looks_like_frame(tokens[i]))):
                if i == len(tokens):
                    closed = False
                    break
                token += ";" + tokens[i]
                i += 1
        out.append(token)
    return out, closed


def _records(text: str) -> Iterable[tuple[str, int]]:
    pending = ""
    # Split on "\n" only: splitlines() would also cut at \x0b, \x85, ... inside names.
    for line in text.split("\n"):
        line = line.removesuffix("\r")
        pending = f"{pending}\n{line}" if pending else line
        m = _RECORD.fullmatch(pending)
        if m is not None and split_frames(m.group("stack"))[1]:
            yield m.group("stack"), int(m.group("count"))
            pending = ""
        elif not _PROCESS.match(pending):
            pending = ""  # malformed: only a process frame's command line spans lines


def parse_collapsed(text: str, sample_s: float = 0.01) -> Stacks:
    """Stacks of collapsed text; each count is ``sample_s`` seconds."""
    pairs = []
    for stack, count in _records(text):
        frames = [parse_frame(t) for t in split_frames(stack)[0] if t]
        pairs.append((clean(frames), count * sample_s))
    return _accumulate(pairs)


def _sanitise(label: str) -> str:
    return label.replace(";", ",").replace("\r", " ").replace("\n", " ")


def to_collapsed(stacks: Stacks, sample_s: float) -> str:
    """Collapsed text (one ``frame;...;frame COUNT`` line per stack), sorted."""
    lines = []
    for stack, weight in stacks.weights.items():
        count = round(weight / sample_s)
        if stack and count:
            lines.append(";".join(_sanitise(f.label) for f in stack) + f" {count}")
    return "".join(sorted(line + "\n" for line in lines))


def load_stacks(path: Path, sample_s: float = 0.01) -> Stacks:
    """Read a ``.json`` speedscope file or collapsed text (other suffixes)."""
    import json

    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        return parse_speedscope(json.loads(text))
    return parse_collapsed(text, sample_s)


# -- normalising and the regime's view ----------------------------------------


def _after(parts: tuple[str, ...], markers: Iterable[str]) -> tuple[str, ...] | None:
    for marker in markers:
        if marker in parts:
            idx = len(parts) - 1 - parts[::-1].index(marker)
            return parts[idx + 1 :]
    return None


def short_file(file: str, roots: Sequence[Path], strip: Sequence[str] = ("src",)) -> str:
    """A file path that is the same for the same module on every ref."""
    if not file or file.startswith("<") or not file.startswith("/"):
        return file
    parts = Path(file).parts
    rest = _after(parts, ("site-packages", "dist-packages"))
    if rest is None:
        # The deepest root first: a ref's worktree lies inside the project root.
        ordered = sorted(roots, key=lambda r: -len(r.parts))
        rest = next(
            (parts[len(r.parts) :] for r in ordered if parts[: len(r.parts)] == r.parts), None
        )
        if rest and rest[0] in strip and len(rest) > 1:
            rest = rest[1:]
    if rest is None:
        m = next((i for i, p in enumerate(parts) if re.fullmatch(r"python\d+\.\d+t?", p)), None)
        rest = parts[m + 1 :] if m is not None and m > 0 and parts[m - 1] == "lib" else None
    return "/".join(rest) if rest else file


def normalise(stacks: Stacks, roots: Sequence[Path], strip: Sequence[str] = ("src",)) -> Stacks:
    """Shorten files (see :func:`short_file`) and drop line numbers."""
    cache: dict[Frame, Frame] = {}

    def norm(f: Frame) -> Frame:
        if f not in cache:
            cache[f] = Frame(f.name, short_file(f.file, roots, strip))
        return cache[f]

    return _accumulate((tuple(norm(f) for f in s), w) for s, w in stacks.weights.items())


def _loop_index(stack: Stack) -> int | None:
    for i, f in enumerate(stack):
        if f.name == LOOP_FUNCTION and f.file.endswith("profile.py"):
            return i
    return None


def regime_view(stacks: Stacks) -> tuple[Stacks, Stacks]:
    """Split into (the timed regime, the rest: start-up, set-up, teardown).

    The regime is what ran below the worker's loop (rooted at the timed
    callable), plus every other thread and subprocess of the worker.
    """
    inside: list[tuple[Stack, float]] = []
    outside: list[tuple[Stack, float]] = []
    for stack, weight in stacks.weights.items():
        idx = _loop_index(stack)
        if idx is not None:
            inside.append((stack[idx + 1 :] or (LOOP,), weight))
        elif stack and stack[0] in (SUBPROCESS, THREAD):
            inside.append((stack, weight))
        else:
            outside.append((stack, weight))
    return _accumulate(inside), _accumulate(outside)
