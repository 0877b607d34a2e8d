"""One note file: its format (Markdown with YAML front matter), reading and rendering it.

A note is `<namespace folder>/<key>.md`:

    ---
    description: When and where the launch is
    updated: "2026-11-29T21:00:00.123456+00:00"
    ---
    The launch is on 3 March in Lisbon.

A plain `.md` file without front matter (written by hand in owner/ or shared/) is a note too:
its file name is the key and its first line the description; it gains front matter the next
time the agent writes it. A file that cannot be read (broken front matter, invalid UTF-8) is
a `NoteFormatError`: reported, and never overwritten or removed by the agent.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any, NamedTuple

import yaml

SUMMARY_LIMIT = 120
_MARK = re.compile(r"^\s*(?:#{1,6}\s+|[-*+]\s+|\d+[.)]\s+|>\s*)")


_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_CLOSING = re.compile(r"\n---\r?(?:\n|$)")


class NoteFormatError(Exception):
    """A note file that cannot be read; it is left as it is."""


def now() -> str:
    return datetime.now(UTC).isoformat()


def content_hash(content: str) -> str:
    return "sha256:" + hashlib.sha256(content.encode("utf-8")).hexdigest()


def one_line(text: str) -> str:
    """A description kept to one line: no line breaks or control characters."""
    if text.isprintable() and "  " not in text and text[:1] != " " and text[-1:] != " ":
        return text  # already one line (the common case, cheaply)
    if not text.isprintable():
        text = "".join(ch if ch.isprintable() else " " for ch in text)
    return " ".join(text.split())


def first_line_summary(content: str) -> str:
    """A note's first non-empty line, without a heading's or list's mark, cut to 120."""
    for line in content.splitlines():
        if line.strip():
            return one_line(_MARK.sub("", line))[:SUMMARY_LIMIT].rstrip()
    return ""


class Note(NamedTuple):
    """A note as read or about to be written. (A tuple: a start makes a hundred thousand.)"""

    namespace: str
    key: str
    content: str
    description: str = ""
    updated: str = ""
    kind: str = "note"
    """`note`, or `episode` for a summary of an earlier conversation (M10)."""

    @property
    def summary(self) -> str:
        """What the index in the prompt shows: the description, else the first line."""
        return (
            self.description[:SUMMARY_LIMIT]
            if self.description
            else first_line_summary(self.content)
        )

    @property
    def hash(self) -> str:
        return content_hash(self.content)

    def render(self) -> str:
        lines = [f"description: {_scalar(self.description)}", f"updated: {_scalar(self.updated)}"]
        if self.kind != "note":
            lines.append(f"kind: {self.kind}")
        return "---\n" + "\n".join(lines) + "\n---\n" + self.content  # content as given


# Front matter is YAML. What the agent writes it writes in a small regular form, which is read
# back without a YAML parser (a YAML parse costs more than the rest of a write, and a start-up
# reads every note); anything else (a hand edit) goes to the YAML parser.
_PLAIN = re.compile(r"^[A-Za-z][A-Za-z0-9 ,._()/&+-]*$")
"""A scalar YAML reads as the same text: a letter first (so never a number or a date), and
none of the characters YAML gives a meaning; its few words (yes, off, null...) aside."""
_FIELD = re.compile(r"^([a-z_]+): (.*)$")


def _scalar(value: str) -> str:
    """A YAML scalar for `value`: plain when that reads back the same, else double-quoted."""
    if _PLAIN.fullmatch(value) and not value.endswith(" ") and value.lower() not in _YAML_WORDS:
        return value
    quoted = json.dumps(value, ensure_ascii=False)  # a JSON string is a YAML double-quoted one
    if not quoted.isprintable():  # YAML refuses raw control characters: escape them
        quoted = "".join(
            ch if ch.isprintable() or ord(ch) > 0xFFFF else f"\\u{ord(ch):04x}" for ch in quoted
        )
    return quoted


_YAML_WORDS = {"true", "false", "yes", "no", "on", "off", "null", "y", "n", "~"}


def _read_front(front: str) -> dict[str, Any] | None:
    """The fields of front matter in the form the agent writes; None for any other form."""
    meta: dict[str, Any] = {}
    for line in front.splitlines():
        match = _FIELD.fullmatch(line)
        if match is None:
            return None
        name, value = match.groups()
        if value.startswith('"'):
            try:
                meta[name] = json.loads(value)
            except json.JSONDecodeError:
                return None
        elif _PLAIN.fullmatch(value) and value.lower() not in _YAML_WORDS:
            meta[name] = value
        else:
            return None
    return meta


_WRITTEN = re.compile(r"---\ndescription: ([^\n]*)\nupdated: ([^\n]*)\n(?:kind: (episode)\n)?---\n")
"""The front matter exactly as `Note.render` writes it (a start reads a hundred thousand)."""


def _written_scalar(value: str) -> str | None:
    """A scalar as `_scalar` writes it, read back; None for anything else."""
    if value.startswith('"'):
        inner = _unescaped(value)
        if inner is not None:
            return inner  # a JSON string without escapes is its own text
        try:
            decoded = json.loads(value)
        except json.JSONDecodeError:
            return None
        return decoded if isinstance(decoded, str) else None
    if _PLAIN.fullmatch(value) and value.lower() not in _YAML_WORDS:
        return value
    return None


def parse_note(raw: bytes, *, namespace: str, key: str, mtime: float) -> Note:
    """A note from its file's bytes; NoteFormatError says what is wrong."""
    try:
        text = raw.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        raise NoteFormatError(f"not valid UTF-8 (byte {exc.start})") from None
    written = _WRITTEN.match(text)
    if written is not None:
        front_description, front_updated, kind = written.groups()
        description = _written_scalar(front_description)
        updated = _written_scalar(front_updated)
        if description is not None and updated:
            body = text[written.end() :]
            return Note(namespace, key, body, one_line(description), updated, kind or "note")

    def modified() -> str:
        return datetime.fromtimestamp(mtime, UTC).isoformat()

    if not text.startswith("---\n") and not text.startswith("---\r\n"):
        return Note(namespace, key, text, first_line_summary(text), modified())
    start = text.index("\n") + 1
    end = _CLOSING.search(text, start - 1)
    if end is None:
        raise NoteFormatError("the front matter is never closed with ---")
    front, body = text[start : end.start() + 1], text[end.end() :]
    meta = _read_front(front)
    if meta is None:
        try:
            meta = yaml.load(front, Loader=_Loader) or {}
        except yaml.YAMLError as exc:
            raise NoteFormatError(f"the front matter is not valid YAML ({exc})") from None
    if not isinstance(meta, dict):
        raise NoteFormatError("the front matter is not a mapping of fields")
    description = meta.get("description") or ""
    if not isinstance(description, str):
        raise NoteFormatError("description: is not text")
    updated = meta.get("updated") or modified()
    if isinstance(updated, datetime | date):
        updated = updated.isoformat()
    kind = meta.get("kind") or "note"
    if kind not in ("note", "episode"):
        raise NoteFormatError(f"kind: {kind!r} is neither note nor episode")
    return Note(namespace, key, body, one_line(description), str(updated), kind)


_OPEN_NOTE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK


def read_written(namespace: str, key: str, path: str) -> tuple[Note, FileState] | None:
    """A note file in the form the agent writes, read with the least work there is (a start
    reads a hundred thousand), with its state; None for anything else (a hand edit, a link,
    a file that is not a plain one...), which `NoteStore.load` then reads, or reports. The
    key is the caller's to check. A property test holds the two to the same reading."""
    try:
        fd = os.open(path, _OPEN_NOTE)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None
        raw = os.read(fd, info.st_size + 1)
    except OSError:
        return None  # the careful way reads it again, and reports what fails
    finally:
        os.close(fd)
    if len(raw) != info.st_size or raw[:4] != b"---\n":
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    written = _WRITTEN.match(text)
    if written is None:
        return None
    description, updated, kind = written.groups()
    updated = _unescaped(updated)
    if not updated:
        return None
    if description[:1] == '"':
        description = _unescaped(description)
    elif not _PLAIN.fullmatch(description) or description.lower() in _YAML_WORDS:
        return None
    if description is None or one_line(description) != description:
        return None  # only one-line descriptions, as the agent writes them
    note = Note(namespace, key, text[written.end() :], description, updated, kind or "note")
    return note, file_state(info)


def _unescaped(value: str) -> str | None:
    """A double-quoted scalar's text when nothing in it is escaped; else None."""
    inner = value[1:-1]
    if len(value) < 2 or value[0] != '"' or value[-1] != '"' or "\\" in inner or '"' in inner:
        return None
    return inner


def read_plain(path: str | Path, *, dir_fd: int | None = None) -> tuple[bytes, os.stat_result]:
    """A note file's bytes: a plain file, never through a symbolic link (which could lead to
    another caller's note or anywhere else) nor a pipe or device (which could block).
    `dir_fd`: `path` is relative to that folder."""
    try:
        fd = os.open(path, _OPEN_NOTE, dir_fd=dir_fd)
    except OSError as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        raise NoteFormatError("not a plain file (a link or something else)") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NoteFormatError("not a plain file")
        data = os.read(fd, info.st_size + 1)
        if len(data) > info.st_size:  # it grew while being read: read the rest
            parts = [data]
            while chunk := os.read(fd, 65536):
                parts.append(chunk)
            data = b"".join(parts)
        return data, info
    finally:
        os.close(fd)


@dataclass(frozen=True, slots=True)
class Problem:
    path: Path
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


FileState = tuple[int, int, int, int]
"""(size, mtime_ns, inode, ctime_ns): what tells a file's versions apart without reading it.
The ctime and the inode too: an edit can keep the size and put the old mtime back (cp -p,
rsync -t), never the ctime. (A plain tuple: a check compares a hundred thousand of them.)"""


def file_state(info: os.stat_result) -> FileState:
    return info.st_size, info.st_mtime_ns, info.st_ino, info.st_ctime_ns
