"""An agent's memory as files its owner takes away (P8): JSON Lines, one entry a line in the
P5 entry shape, and a zip of Markdown notes in the local folder layout, which unzipped into
an agent folder's `.webagents/memory/` is read as its notes.

The zip holds `owner/<key>.md`, `shared/<key>.md` and `callers/<folder>/<key>.md` with the
folder's `.namespace` marker, each note in `note_file`'s format (so the local store reads the
description and content back exactly), folders 0700 and files 0600 as the agent keeps them.
An entry the local layout cannot hold (a key that is not a valid file name there, or a
namespace that is none of owner, shared, caller:...) is left out of the zip and named in the
zip's comment (not in a file, which would land among the notes); the JSON Lines export always
holds every entry.
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Iterable, Iterator, Mapping
from datetime import UTC, datetime
from typing import Any, Protocol

import orjson

from ...caller import OWNER_NAMESPACE, SHARED_NAMESPACE
from ...notes.layout import EPISODE_PREFIX, NAMESPACE_FILE, caller_folder_name, is_key
from ...notes.note_file import Note, one_line

FILE_MODE = 0o600
FOLDER_MODE = 0o700
_COMMENT_LIMIT = 65535  # a zip comment's most bytes


class ExportedEntry(Protocol):
    """What an export reads of an entry (the store's rows and P5 entries both have it)."""

    @property
    def namespace(self) -> str: ...
    @property
    def key(self) -> str: ...
    @property
    def content(self) -> str: ...
    @property
    def description(self) -> str: ...
    @property
    def updated_at(self) -> datetime: ...


def jsonl_lines(entries: Iterable[Mapping[str, Any]]) -> Iterator[bytes]:
    """One JSON object a line (the P5 entry shape as the API answers it), each ending "\\n"."""
    for entry in entries:
        yield orjson.dumps(entry) + b"\n"


def zip_path(namespace: str, key: str) -> str | None:
    """Where a note goes in the zip (the local layout); None when it cannot be a note file."""
    if not is_key(key):
        return None
    if namespace in (OWNER_NAMESPACE, SHARED_NAMESPACE):
        return f"{namespace}/{key}.md"
    if namespace.startswith("caller:") and len(namespace) > len("caller:"):
        return f"callers/{caller_folder_name(namespace)}/{key}.md"
    return None


def _moment(value: datetime) -> str:
    return (value if value.tzinfo else value.replace(tzinfo=UTC)).astimezone(UTC).isoformat()


def note_text(entry: ExportedEntry) -> str:
    """The entry as a note file, exactly as the local store writes one."""
    kind = "episode" if entry.key.startswith(EPISODE_PREFIX) else "note"
    note = Note(
        entry.namespace,
        entry.key,
        entry.content,
        one_line(entry.description),
        _moment(entry.updated_at),
        kind,
    )
    return note.render()


def _info(name: str, mode: int, moment: datetime) -> zipfile.ZipInfo:
    stamp = moment.astimezone(UTC)
    date_time = (
        (stamp.year, stamp.month, stamp.day, stamp.hour, stamp.minute, stamp.second)
        if stamp.year >= 1980
        else (1980, 1, 1, 0, 0, 0)
    )
    info = zipfile.ZipInfo(name, date_time=date_time)
    info.compress_type = zipfile.ZIP_DEFLATED
    kind = 0o040000 if name.endswith("/") else 0o100000  # S_IFDIR / S_IFREG
    info.external_attr = ((kind | mode) << 16) | (0x10 if name.endswith("/") else 0)
    info.create_system = 3  # Unix: unzip keeps the modes
    return info


def notes_zip(entries: Iterable[ExportedEntry], *, now: datetime | None = None) -> bytes:
    """The zip of Markdown notes in the local layout (see the module's docstring)."""
    moment = now or datetime.now(UTC)
    buffer = io.BytesIO()
    left_out: list[str] = []
    folders: set[str] = set()
    with zipfile.ZipFile(buffer, "w") as archive:
        for entry in entries:
            path = zip_path(entry.namespace, entry.key)
            if path is None:
                left_out.append(f"{entry.namespace!r} {entry.key!r}")
                continue
            folder = path.rsplit("/", 1)[0] + "/"
            if folder not in folders:
                folders.add(folder)
                if folder.startswith("callers/") and "callers/" not in folders:
                    folders.add("callers/")
                    archive.writestr(_info("callers/", FOLDER_MODE, moment), b"")
                archive.writestr(_info(folder, FOLDER_MODE, moment), b"")
                if folder.startswith("callers/"):
                    marker = _info(folder + NAMESPACE_FILE, FILE_MODE, moment)
                    archive.writestr(marker, entry.namespace.encode("utf-8"))
            info = _info(path, FILE_MODE, entry.updated_at)
            archive.writestr(info, note_text(entry).encode("utf-8"))
        if left_out:
            comment = (
                f"{len(left_out)} entries are not in this zip: their keys or namespaces cannot "
                "be note files (the JSON Lines export has them): " + ", ".join(left_out)
            )
            archive.comment = comment.encode("utf-8")[:_COMMENT_LIMIT]
    return buffer.getvalue()
