"""The plan document: generated blocks between markers, and their markdown.

Only the text between ``<!-- perfctl:begin NAME -->`` and
``<!-- perfctl:end NAME -->`` (or a bare ``<!-- perfctl:end -->``) is ever
rewritten; every other byte of the file is kept exactly (line endings,
trailing spaces, invalid UTF-8 included). Markers count only on a line of
their own and outside fenced code blocks, so a document may quote them.

Blocks: ``phase-tracker``, ``baseline``, ``phase-<id>``, ``success-metrics``
and ``update-log``. The update log keeps a hidden digest of each phase's
result table and gains an entry only when a digest changes, so updating twice
with no new data rewrites nothing.
"""

from __future__ import annotations

import contextlib
import difflib
import os
import re
import stat
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from perfctl.errors import PlanError
from perfctl.files import check_output_file
from perfctl.render.escape import shell_command

STATIC_BLOCKS = ("phase-tracker", "baseline", "success-metrics", "update-log")
MARKER_HINT = (
    "generated blocks look like `<!-- perfctl:begin NAME -->` … `<!-- perfctl:end NAME -->`"
)
_MARKER = re.compile(r"^[ \t]*<!--[ \t]*perfctl:(begin|end)\b[ \t]*([^\s>]*)[ \t]*-->[ \t]*$")
_ANY_MARKER = re.compile(r"^[ \t]*<!--[ \t]*perfctl:")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
DIGESTS = re.compile(r"^<!-- perfctl:results(.*)-->$")
ENCODING = ("utf-8", "surrogateescape")  # round-trips any byte, valid UTF-8 or not


@dataclass(frozen=True)
class Block:
    """One generated block: its marker lines (kept verbatim) and its content."""

    name: str
    line: int  # 1-based line of the begin marker
    begin: str
    inner: str
    end: str

    @property
    def eol(self) -> str:
        """The line ending generated lines get: the begin marker's own."""
        return "\r\n" if self.begin.endswith("\r\n") else "\n"


@dataclass(frozen=True)
class PlanDoc:
    """A plan file as prose strings and blocks, in order."""

    label: str
    parts: tuple[str | Block, ...]

    def blocks(self) -> list[Block]:
        """The generated blocks, in document order."""
        return [p for p in self.parts if isinstance(p, Block)]

    def block(self, name: str) -> Block | None:
        """The block called ``name``, if present."""
        return next((b for b in self.blocks() if b.name == name), None)

    def render(self, contents: Mapping[str, Sequence[str]]) -> str:
        """The document with the named blocks' contents replaced by these lines."""
        out = []
        for part in self.parts:
            if isinstance(part, str):
                out.append(part)
                continue
            lines = contents.get(part.name)
            inner = part.inner if lines is None else "".join(ln + part.eol for ln in lines)
            out.append(part.begin + inner + part.end)
        return "".join(out)


# --- parsing ---------------------------------------------------------------------


def lines_of(text: str) -> list[str]:
    """The lines of ``text`` with their endings, split on "\\n" only (not U+2028 and friends)."""
    return re.findall(r"[^\n]*\n|[^\n]+\Z", text)


class _Parser:
    """Walks the lines once, tracking fences and the open block."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.parts: list[str | Block] = []
        self.prose: list[str] = []
        self.fence = ""
        self.open: tuple[str, int, str] | None = None  # name, line, begin text
        self.inner: list[str] = []

    def fail(self, line: int, message: str, hint: str = MARKER_HINT) -> PlanError:
        return PlanError(f"{self.label}:{line}: {message}", hint)

    def feed(self, no: int, line: str) -> None:
        body = line.rstrip("\r\n")
        if self.open is None and self._fenced(body):
            self.prose.append(line)
            return
        m = _MARKER.match(body)
        if m is None:
            if self.open is None and _ANY_MARKER.match(body):
                raise self.fail(no, f"unrecognised perfctl marker `{body.strip()}`")
            (self.inner if self.open else self.prose).append(line)
        elif m.group(1) == "begin":
            self._begin(no, line, m.group(2))
        else:
            self._end(no, line, m.group(2))

    def _fenced(self, body: str) -> bool:
        m = _FENCE.match(body)
        if self.fence:
            if (
                m
                and m.group(1)[0] == self.fence[0]
                and len(m.group(1)) >= len(self.fence)
                and (not body.strip().strip(self.fence[0]))
            ):
                self.fence = ""
            return True
        if m:
            self.fence = m.group(1)
            return True
        return False

    def _begin(self, no: int, line: str, name: str) -> None:
        if self.open is not None:
            other, at, _ = self.open
            raise self.fail(
                no,
                f"`perfctl:begin {name}` inside block `{other}` opened at line {at}",
                f"close it with `<!-- perfctl:end {other} -->` first",
            )
        if not name:
            raise self.fail(no, "`perfctl:begin` without a block name")
        self.parts.append("".join(self.prose))
        self.prose, self.inner, self.open = [], [], (name, no, line)

    def _end(self, no: int, line: str, name: str) -> None:
        if self.open is None:
            shown = f"perfctl:end {name}".strip()
            raise self.fail(
                no,
                f"`{shown}` has no matching begin marker",
                "add the `<!-- perfctl:begin NAME -->` line above it, or delete it",
            )
        other, at, begin = self.open
        if name and name != other:
            raise self.fail(
                no,
                f"`perfctl:end {name}` closes block `{other}` opened at line {at}",
                f"write `<!-- perfctl:end {other} -->`",
            )
        self.parts.append(Block(other, at, begin, "".join(self.inner), line))
        self.open = None

    def finish(self) -> PlanDoc:
        if self.open is not None:
            name, at, _ = self.open
            raise self.fail(
                at,
                f"block `{name}` has no end marker",
                f"add `<!-- perfctl:end {name} -->` where the block ends",
            )
        self.parts.append("".join(self.prose))
        return PlanDoc(self.label, tuple(p for p in self.parts if p != ""))


def parse_doc(text: str, label: str) -> PlanDoc:
    """Split a plan into prose and blocks; PlanError naming the line on bad markers."""
    parser = _Parser(label)
    for no, line in enumerate(lines_of(text), 1):
        parser.feed(no, line)
    doc = parser.finish()
    if not doc.blocks():
        raise PlanError(
            f"{label}: no perfctl markers found",
            "add blocks such as `<!-- perfctl:begin phase-tracker -->` … "
            "`<!-- perfctl:end phase-tracker -->`, or start from `perfctl plan init`",
        )
    return doc


def read_doc(path: Path, label: str) -> PlanDoc:
    """Read and parse a plan file."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise PlanError(
            f"cannot read {label}: {exc.strerror}",
            f"create it with `{shell_command('perfctl', 'plan', 'init', label)}`",
        ) from exc
    return parse_doc(data.decode(*ENCODING), label)


def check_names(doc: PlanDoc, phase_ids: Sequence[str]) -> None:
    """Every block name is known and used once; ``phase-<id>`` names a configured phase."""
    known = [*STATIC_BLOCKS, *(f"phase-{p}" for p in phase_ids)]
    seen: dict[str, int] = {}
    for b in doc.blocks():
        if b.name in seen:
            raise PlanError(
                f"{doc.label}:{b.line}: block `{b.name}` appears twice (first at "
                f"line {seen[b.name]})",
                "keep one of them",
            )
        seen[b.name] = b.line
        if b.name in known:
            continue
        close = difflib.get_close_matches(b.name, STATIC_BLOCKS, n=1, cutoff=0.8)
        hint = f"did you mean `{close[0]}`? " if close else ""
        if b.name.startswith("phase-") and not close:
            raise PlanError(
                f"{doc.label}:{b.line}: block `{b.name}` names unknown phase "
                f"`{b.name.removeprefix('phase-')}`",
                "configured phases: " + ", ".join(phase_ids),
            )
        raise PlanError(
            f"{doc.label}:{b.line}: unknown block `{b.name}`", hint + "blocks: " + ", ".join(known)
        )


def write_atomic(path: Path, text: str) -> None:
    """Replace the file in one step (temp file in the same directory + os.replace)."""
    target = check_output_file(path, "the plan").resolve()
    try:
        mode = stat.S_IMODE(target.stat().st_mode)
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(text.encode(*ENCODING))
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)  # mkstemp makes 0600; keep the plan's own permissions
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
