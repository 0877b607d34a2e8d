"""Export (P8): the zip of Markdown notes is in the local folder layout and loads as notes
through the real local memory store, a caller's namespace included; what the layout cannot
hold is named in the zip's comment, and the JSON Lines export is one P5 entry a line."""

from __future__ import annotations

import io
import stat
import zipfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import orjson

from webagents.notes.index import MemoryIndex
from webagents.notes.layout import caller_folder_name
from webagents.notes.store import NoteStore
from webagents.portal.memory.export import jsonl_lines, notes_zip, zip_path

from .export_helpers import _unzip

AT = datetime(2026, 11, 29, 21, 0, 0, 123456, tzinfo=UTC)


@dataclass(frozen=True)
class Row:
    namespace: str
    key: str
    content: str
    description: str
    updated_at: datetime = AT


ROWS = [
    Row("owner", "launch-plan", "The launch is on 3 March in Lisbon.\n", "When and where"),
    Row("shared", "faq", "---\nnot front matter: just content\n", 'Quotes " and: colons'),
    Row("caller:alice@example.com", "preferences", "Likes tea.\nNo sugar.", "Alice's taste"),
    Row("caller:jwt:https://id.example#Bob", "notes", "", ""),
    Row("caller:alice@example.com", "episode-2026-11-29", "We talked about tea.", "A chat"),
]


def test_p8_export_zip_loads_as_notes_in_the_local_memory_store(tmp_path: Path) -> None:
    root = tmp_path / "agent" / ".webagents" / "memory"
    root.mkdir(parents=True)
    _unzip(notes_zip(ROWS, now=AT), root)

    store = NoteStore(root)
    index = MemoryIndex(store)
    index.rebuild()
    assert index.all_problems() == []
    assert store.namespaces() == [
        "owner",
        "shared",
        *sorted(
            ["caller:alice@example.com", "caller:jwt:https://id.example#Bob"],
            key=caller_folder_name,
        ),
    ]
    read = {(row.namespace, row.key): store.read(row.namespace, row.key) for row in ROWS}
    assert {
        where: (note.content, note.description, note.updated, note.kind) if note else None
        for where, note in read.items()
    } == {
        (row.namespace, row.key): (
            row.content,
            row.description,
            AT.isoformat(),
            "episode" if row.key.startswith("episode-") else "note",
        )
        for row in ROWS
    }
    alice = [entry.key for entry in index.entries("caller:alice@example.com")]
    assert alice == ["preferences"]
    assert [e.key for e in index.entries("caller:alice@example.com", kind="episode")] == [
        "episode-2026-11-29"
    ]
    folder = root / "callers" / caller_folder_name("caller:alice@example.com")
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE((folder / "preferences.md").stat().st_mode) == 0o600


def test_p8_export_zip_names_what_the_local_layout_cannot_hold() -> None:
    rows = [
        Row("owner", "Not A Key", "x", ""),
        Row("elsewhere", "fine", "y", ""),
        Row("owner", "kept", "z", ""),
    ]
    with zipfile.ZipFile(io.BytesIO(notes_zip(rows, now=AT))) as archive:
        assert archive.namelist() == ["owner/", "owner/kept.md"]
        assert archive.comment.decode() == (
            "2 entries are not in this zip: their keys or namespaces cannot be note files "
            "(the JSON Lines export has them): 'owner' 'Not A Key', 'elsewhere' 'fine'"
        )
    assert (zip_path("caller:", "x"), zip_path("owner", "../x"), zip_path("shared", "a.b")) == (
        None,
        None,
        "shared/a.b.md",
    )


def test_p8_export_jsonl_is_one_entry_a_line() -> None:
    entries = [
        {"id": "1", "namespace": "owner", "key": "a", "content": "two\nlines"},
        {"id": "2", "namespace": "shared", "key": "b", "content": ""},
    ]
    data = b"".join(jsonl_lines(entries))
    assert data.count(b"\n") == 2
    assert [orjson.loads(line) for line in data.splitlines()] == entries
