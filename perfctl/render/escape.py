"""Making user text inert wherever perfctl writes it: terminal, markdown, shell.

Regime names, refs, commit subjects, failure reasons and anything read from a
comparison file are user text (a forked PR controls its ``comparison.json``).
Every renderer passes such text through one of these functions:

* :func:`strip_unsafe` for the terminal: no C0/C1 control characters (an ESC
  could drive the terminal), no bidi overrides (they reorder what is shown);
* :func:`escape_plain` for one line of plain text, length-capped;
* :func:`md_escape` for markdown (PR comments, tables, the plan): no HTML, no
  table breaks, links, code spans or mentions;
* :func:`md_name` for a regime name or ref in the plan: a code span when that
  is safe, escaped text otherwise;
* :func:`shell_command` for a command perfctl suggests: every word quoted
  (:func:`shell_word` for one word put into a command template).

This module imports nothing heavy: the CLI uses it at start-up.
"""

from __future__ import annotations

import re
import shlex

CELL_MAX = 200  # longest user-controlled text kept in one markdown cell
# C0 controls, DEL and C1 controls: replaced by a space.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# Bidi embeddings/overrides/isolates (U+202A-E, U+2066-9) and the implicit
# marks (LRM, RLM, ALM): removed, so text shows in the order it is stored.
_BIDI = re.compile(r"[\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c]")
# Backslash-escaped in user text: everything that starts inline markdown
# (emphasis, code, links, strikethrough, math) or ends a table cell.
_MD_SPECIALS = "\\`*_[]~|$#!"
_MD_ESCAPES = str.maketrans(
    {"&": "&amp;", "<": "&lt;", ">": "&gt;", **{ch: "\\" + ch for ch in _MD_SPECIALS}}
)
_MENTION = re.compile(r"@(?=\w)")
# Names shown as a code span as they are: nothing that could end the span,
# start HTML or a link, or hide in the rendering.
_CODE_SAFE = re.compile(r"^[A-Za-z0-9_.,:=+/\-\[\] ]{1,200}$")


def strip_unsafe(text: object) -> str:
    """``text`` without bidi controls and with control characters as spaces."""
    return _CONTROL.sub(" ", _BIDI.sub("", str(text)))


def escape_plain(text: object, limit: int = CELL_MAX) -> str:
    """One line of at most ``limit`` characters, control characters removed."""
    line = " ".join(strip_unsafe(text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def md_escape(text: object, limit: int = CELL_MAX) -> str:
    """User text made inert in markdown: no HTML, table breaks, links or mentions."""
    escaped = escape_plain(text, limit).translate(_MD_ESCAPES)
    # A zero-width space after '@' keeps a commit subject from pinging people.
    return _MENTION.sub("@\u200b", escaped)


def md_name(name: object, limit: int = CELL_MAX) -> str:
    """A regime name or ref for markdown: `` `name` `` when plain, else escaped text."""
    text = str(name)
    return f"`{text}`" if _CODE_SAFE.match(text) else md_escape(text, limit)


def rich_escape(text: object) -> str:
    """User text for rich markup (regime names contain ``[...]``), made terminal-safe."""
    from rich.markup import escape

    return escape(strip_unsafe(text))


def shell_command(*words: object) -> str:
    """A command line to paste into a shell: every word quoted where it needs it.

    Control characters become spaces first, so the command stays on one line
    (a fenced code block cannot be closed from inside it).
    """
    return " ".join(shell_word(w) for w in words)


def shell_word(word: object) -> str:
    """One word of a suggested command, quoted for a POSIX shell, on one line."""
    return shlex.quote(strip_unsafe(word))
