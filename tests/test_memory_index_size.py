"""M9 and issue 11: the memory index does not hold the notes' text in memory.

What the index holds is counted, not timed: SQLite's own allocations (the page cache, the
full-text index's pending terms) through SQLite's memory statistics, and Python's through
tracemalloc, while a start reads notes whose text is several times the bounds.
"""

from __future__ import annotations

import _sqlite3
import ctypes
import random
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from webagents.notes import index as index_module
from webagents.notes.index import MemoryIndex
from webagents.notes.layout import namespace_folder
from webagents.notes.note_file import Note
from webagents.notes.store import NoteStore

MIB = 1 << 20
NOTES = 1000
NOTE_CHARS = 24_000  # 1000 notes of 24,000 characters: 23 MiB of text
SPACES = ["owner", "shared"] + [f"caller:user{n}@example.com" for n in range(8)]


def _sqlite_statistics() -> tuple[Callable[[], int], Callable[[], int]]:
    """SQLite's sqlite3_memory_used() and sqlite3_memory_highwater(reset) of this process."""
    try:
        library = ctypes.CDLL(_sqlite3.__file__)
        used, highwater = library.sqlite3_memory_used, library.sqlite3_memory_highwater
    except (OSError, AttributeError):  # pragma: no cover - depends on how Python was built
        pytest.skip("SQLite's memory statistics are not reachable from this Python")
    used.restype = highwater.restype = ctypes.c_int64
    used.argtypes = []
    highwater.argtypes = [ctypes.c_int]
    return used, lambda: int(highwater(1))  # the peak since the last call, then reset


@contextmanager
def _measured() -> Iterator[dict[str, int]]:
    """The peak and the held memory (bytes) of SQLite and of Python over the block."""
    used, peak_and_reset = _sqlite_statistics()
    figures: dict[str, int] = {}
    tracemalloc.start()
    try:
        sqlite_before = used()
        peak_and_reset()
        yield figures
        figures["sqlite peak"] = peak_and_reset() - sqlite_before
        figures["sqlite held"] = used() - sqlite_before
        figures["python held"], figures["python peak"] = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()


def _lay_out(root: Path) -> int:
    """NOTES note files over SPACES, each of NOTE_CHARS characters of made-up words (so that
    the full-text index is large too); their total text in characters."""
    rng = random.Random(11)
    words = ["".join(rng.choices("abcdefghijklmnop", k=7)) for _ in range(20_000)]
    pieces = [" ".join(rng.choices(words, k=100)) for _ in range(500)]  # 800 characters each
    total = 0
    for n in range(NOTES):
        namespace = SPACES[n % len(SPACES)]
        folder = namespace_folder(root, namespace)
        if not folder.exists():
            folder.mkdir(parents=True)
            if namespace.startswith("caller:"):
                (folder / ".namespace").write_text(namespace)
        text = " ".join(rng.choices(pieces, k=NOTE_CHARS // 800))
        text += f" needle{n}" if n % 250 == 0 else ""
        total += len(text)
        note = Note(namespace, f"note-{n}", text, f"Note {n}", "2026-11-30T10:00:00+00:00")
        (folder / f"note-{n}.md").write_text(note.render())
    return total


def test_m9_the_memory_index_keeps_no_notes_text_in_memory(tmp_path: Path) -> None:
    """M9: a start (without a cache, then from the cache) and the queries after it hold a
    bounded amount of memory, not every note's text: the index lives in a file (private,
    removed when it closes), read through a bounded page cache, and a start reads the files
    in batches bounded in bytes. The old index held all of it in an in-memory database."""
    root = tmp_path / "memory"
    text = _lay_out(root)
    assert text > 22 * MIB
    cache = root / ".index.sqlite"
    for start in ("without a cache", "from the cache"):
        assert cache.exists() == (start == "from the cache")
        with _measured() as figures:
            index = MemoryIndex(NoteStore(root), cache=cache)
            index.rebuild()
            index.refresh(SPACES)  # every namespace's files checked, as first queries do
            hits = index.search("needle250 needle750", SPACES)
            listed = index.entries("owner")
        assert sorted(hit.entry.key for hit in hits) == ["note-250", "note-750"], start
        assert len(listed) == NOTES // len(SPACES)
        assert sum(index.counts().values()) == NOTES
        # SQLite: its page cache (CACHE_MIB, 8) and a batch's full-text work; Python: a batch
        # of notes (256k characters) and what a row of the index costs.
        assert figures["sqlite peak"] < 16 * MIB, (start, figures)
        assert figures["sqlite held"] < 16 * MIB, (start, figures)
        assert figures["python peak"] < 4 * MIB, (start, figures)
        assert figures["python held"] < 1 * MIB, (start, figures)
        index.close()
    leftovers = sorted(p.name for p in root.iterdir() if p.is_file())
    assert leftovers == [".index.sqlite"]  # the working file went with the index


def test_m9_an_index_whose_folder_cannot_be_written_works_in_a_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """M9: where the memory folder takes no working file (and no cache), the index works in
    SQLite's own temporary file, says so, and finds, lists and forgets as ever; an index
    without a cache path does the same without a word."""
    root = tmp_path / "memory"
    folder = namespace_folder(root, "owner")
    folder.mkdir(parents=True)
    for key, text in (("tea", "Green tea at four"), ("coffee", "Coffee at nine")):
        note = Note("owner", key, text, f"About {key}", "2026-11-30T10:00:00+00:00")
        (folder / f"{key}.md").write_text(note.render())

    def refused(path: Path) -> Path:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr("webagents.notes.index_db.ensure_private_dir", refused)
    cache = root / ".index.sqlite"
    unwritable = MemoryIndex(NoteStore(root), cache=cache)
    unwritable.rebuild()
    monkeypatch.undo()
    without_cache = MemoryIndex(NoteStore(root))
    without_cache.rebuild()
    for index in (unwritable, without_cache):
        assert [hit.entry.key for hit in index.search("tea", ["owner"])] == ["tea"]
        assert sorted(entry.key for entry in index.entries("owner")) == ["coffee", "tea"]
        (folder / "tea.md").unlink()
        index.refresh(["owner"])
        assert [entry.key for entry in index.entries("owner")] == ["coffee"]
        index.close()
        note = Note("owner", "tea", "Green tea at four", "About tea", "2026-11-30T10:00:00+00:00")
        (folder / "tea.md").write_text(note.render())
    assert not cache.exists() and sorted(p.name for p in root.iterdir()) == ["owner"]
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warnings == [
        f"memory: the index works in a temporary file, as {root} cannot be written "
        f"([Errno 13] Permission denied: '{root}')",
    ] * 2 + [
        f"memory: the index cache {cache} was not written ([Errno 13] Permission denied: '{root}')"
    ]


def test_m9_an_index_whose_file_fills_up_is_kept_in_memory_instead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """M9: a start whose working file cannot grow (a full disk) still indexes every note,
    in memory as before, says so, and writes the cache for the next start."""
    root = tmp_path / "memory"
    folder = namespace_folder(root, "owner")
    folder.mkdir(parents=True)
    for n in range(40):
        note = Note("owner", f"n{n}", f"word{n} " * 200, f"Note {n}", "2026-11-30T10:00:00+00:00")
        (folder / f"n{n}.md").write_text(note.render())
    working = index_module.working_database

    def full_disk(cache: Path | None, *, copy_of: Path | None = None) -> object:
        db, file = working(cache, copy_of=copy_of)
        db.execute("PRAGMA max_page_count = 12")  # as if the disk were full past 12 pages
        return db, file

    monkeypatch.setattr(index_module, "working_database", full_disk)
    cache = root / ".index.sqlite"
    index = MemoryIndex(NoteStore(root), cache=cache)
    index.rebuild()
    assert [hit.entry.key for hit in index.search("word7 word31", ["owner"])] in (
        ["n7", "n31"],
        ["n31", "n7"],
    )
    assert len(index.entries("owner")) == 40
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == [
        "memory: the index cannot work in a file (database or disk is full): it is kept in "
        "memory until the next start"
    ]
    monkeypatch.undo()
    again = MemoryIndex(NoteStore(root), cache=cache)
    again.rebuild()  # from the cache the in-memory index wrote
    assert len(again.entries("owner")) == 40
    assert again._db.execute("SELECT count(*) FROM notes_fts_docsize").fetchone()[0] == 40
