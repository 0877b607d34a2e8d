"""The full-text index of the notes (M9): SQLite FTS5, rebuilt from the files at start.

The files stay the truth. The index follows them: every query first checks the generation of
the namespaces it reads (bumped by every write, in any process) and the folders' mtimes (for
files added or removed by hand), and rescans a namespace that changed. A rescan parses only
the files whose size or mtime differ from what was indexed.

User text never reaches FTS5's query syntax: a query is split into words and each is matched
as a quoted phrase, and the namespaces a caller may read are bound parameters.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import os
import re
import sqlite3
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ..._files import ensure_private_dir
from .notes import Change, FileState, Note, NoteFormatError, NoteStore, Problem

log = logging.getLogger("webagents.memory")

_WORD = re.compile(r"\w+", re.UNICODE)
MAX_QUERY_WORDS = 32
CACHE_VERSION = 3
RECHECK_SECONDS = 1.0
"""How stale the index may be about a file edited in place (which changes neither the
namespace's generation nor its folder): a namespace is checked file by file this often."""
"""Bumped whenever the schema below changes, so that an older cache file is not used."""

_SCHEMA = """
CREATE TABLE notes (
    id INTEGER PRIMARY KEY,
    namespace TEXT NOT NULL,
    key TEXT NOT NULL,
    kind TEXT NOT NULL,
    description TEXT NOT NULL,
    summary TEXT NOT NULL,
    content TEXT NOT NULL,
    updated TEXT NOT NULL,
    size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    ino INTEGER NOT NULL,
    ctime_ns INTEGER NOT NULL,
    nsid TEXT NOT NULL,
    UNIQUE (namespace, key)
);
CREATE INDEX notes_by_time ON notes (namespace, kind, updated);
CREATE TABLE seen (namespace TEXT PRIMARY KEY, generation INTEGER, folder_mtime_ns INTEGER);
CREATE VIRTUAL TABLE notes_fts USING fts5(
    key, description, content, nsid, content='notes', content_rowid='id', tokenize='unicode61'
);
"""


@dataclass(frozen=True, slots=True)
class Entry:
    """A note as the index knows it (without its content)."""

    namespace: str
    key: str
    kind: str
    description: str
    summary: str
    updated: str


@dataclass(frozen=True, slots=True)
class Hit:
    entry: Entry
    snippet: str


def fts_query(text: str) -> str | None:
    """A safe FTS5 query: every word of `text` as a quoted phrase, any of them matching."""
    words = _WORD.findall(text)[:MAX_QUERY_WORDS]
    return " OR ".join(f'"{word}"' for word in words) or None


@functools.lru_cache(maxsize=4096)
def namespace_id(namespace: str) -> str:
    """One FTS token per namespace, so a query is narrowed to the readable ones by the index
    itself (the exact namespace is still checked on every row)."""
    return "ns" + hashlib.sha256(namespace.encode("utf-8")).hexdigest()[:24]


class MemoryIndex:
    def __init__(self, store: NoteStore, *, cache: Path | None = None) -> None:
        self.store = store
        self.cache = cache
        """A file the index is kept in between starts (None: rebuilt from scratch each time)."""
        self._db = sqlite3.connect(":memory:", check_same_thread=False)
        self._db.executescript(_SCHEMA)
        self._lock = threading.RLock()
        self._seen: dict[str, tuple[int, int]] = {}
        self._checked: dict[str, float] = {}
        self.problems: dict[str, list[Problem]] = {}

    # -- keeping up with the files ----------------------------------------------------------

    def rebuild(self) -> None:
        """Index every note of every namespace, as the agent starts.

        With a cache file from an earlier start, its rows are reused for the files whose size
        and mtime are unchanged and only the others are read; without one, every file is read
        and the full-text index built in one go. Either way the files are the truth.
        """
        with self._lock:
            reused = self._load_cache()
            changed = not reused
            with self._db:
                self._seen.clear()
                self._checked.clear()
                self.problems.clear()
                present = self.store.namespaces()
                if reused:
                    stale = self._db.execute(
                        f"SELECT id FROM notes WHERE namespace NOT IN "
                        f"({','.join('?' * len(present))})",
                        present,
                    ).fetchall()
                    for (row_id,) in stale:
                        self._delete(row_id)
                    cached = {
                        ns: (generation, mtime)
                        for ns, generation, mtime in self._db.execute("SELECT * FROM seen")
                    }
                    for namespace in present:
                        state = self.state(namespace)
                        if cached.get(namespace) == state:
                            # Nothing added or removed since the cache was written: its rows
                            # stand, and the first query checks the files one by one.
                            self._seen[namespace] = state
                        else:
                            self._reconcile(namespace, state)
                            changed = True
                    changed = changed or bool(stale)
                else:
                    for namespace in present:
                        state = self.state(namespace)
                        rows = []
                        for key, (path, file_state) in self.store.files(namespace).items():
                            note = self._load(namespace, key, path, file_state)
                            if note is not None:
                                rows.append(_row(note, file_state))
                        self._db.executemany(_INSERT, rows)
                        self._seen[namespace] = state
                        self._checked[namespace] = time.monotonic()
                    self._db.execute("INSERT INTO notes_fts(notes_fts) VALUES ('rebuild')")
                self._db.execute("DELETE FROM seen")
                self._db.executemany(
                    "INSERT INTO seen VALUES (?, ?, ?)",
                    [(ns, *state) for ns, state in self._seen.items()],
                )
            if changed:
                self._save_cache()
        for problem in self.all_problems():
            log.warning("memory: %s (left as it is)", problem)

    def _load_cache(self) -> bool:
        """Start from the cache file when there is a usable one; False for an empty index."""
        self._db.close()
        self._db = sqlite3.connect(":memory:", check_same_thread=False)
        if self.cache is not None and self.cache.exists():
            try:
                cached = sqlite3.connect(f"file:{self.cache}?mode=ro", uri=True)
                try:
                    if cached.execute("PRAGMA user_version").fetchone()[0] == CACHE_VERSION:
                        cached.backup(self._db)
                        return True
                finally:
                    cached.close()
            except sqlite3.Error as exc:
                log.warning("memory: the index cache %s cannot be used (%s)", self.cache, exc)
            self._db.close()
            self._db = sqlite3.connect(":memory:", check_same_thread=False)
        self._db.executescript(_SCHEMA)
        return False

    def _save_cache(self) -> None:
        """Keep the index beside the notes for the next start (0600: it holds their text)."""
        if self.cache is None:
            return
        tmp = self.cache.with_name(f".{self.cache.name}.{os.getpid()}.tmp")
        try:
            ensure_private_dir(self.cache.parent)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.close(fd)
            target = sqlite3.connect(tmp)
            try:
                self._db.execute(f"PRAGMA user_version = {CACHE_VERSION}")
                self._db.backup(target)
            finally:
                target.close()
            os.replace(tmp, self.cache)
        except (OSError, sqlite3.Error) as exc:
            log.warning("memory: the index cache %s was not written (%s)", self.cache, exc)
            with contextlib.suppress(OSError):
                os.unlink(tmp)

    def refresh(self, namespaces: Iterable[str]) -> None:
        """Rescan each of `namespaces` that changed since it was last indexed."""
        now = time.monotonic()
        for namespace in namespaces:
            state = self.state(namespace)
            stale = now - self._checked.get(namespace, float("-inf")) > RECHECK_SECONDS
            if self._seen.get(namespace) != state or stale:
                self._rescan(namespace, state)

    def state(self, namespace: str) -> tuple[int, int]:
        """(generation, folder mtime): what changes whenever a note is added or removed."""
        try:
            mtime = self.store.folder(namespace).stat().st_mtime_ns
        except FileNotFoundError:
            mtime = 0
        return self.store.generation(namespace), mtime

    def _rescan(self, namespace: str, state: tuple[int, int]) -> None:
        with self._lock, self._db:
            self._reconcile(namespace, state)

    def _reconcile(self, namespace: str, state: tuple[int, int]) -> None:
        """Bring one namespace's rows in line with its files (changed files are read)."""
        indexed = {
            key: (row_id, (size, mtime, ino, ctime))
            for row_id, key, size, mtime, ino, ctime in self._db.execute(
                "SELECT id, key, size, mtime_ns, ino, ctime_ns FROM notes WHERE namespace = ?",
                (namespace,),
            )
        }
        files = self.store.files(namespace)
        reported = set(self.problems.get(namespace, []))
        self.problems[namespace] = []
        for key, (row_id, _) in indexed.items():
            if key not in files:
                self._delete(row_id)
        for key, (path, file_state) in files.items():
            known = indexed.get(key)
            if known is not None and known[1] == file_state:
                continue
            note = self._load(namespace, key, path, file_state)
            if known is not None:
                self._delete(known[0])
            if note is not None:
                self._insert(note, file_state)
        for problem in self.problems[namespace]:
            if problem not in reported:
                log.warning("memory: %s (left as it is)", problem)
        self._seen[namespace] = state
        self._checked[namespace] = time.monotonic()

    def _load(self, namespace: str, key: str, path: str, state: FileState) -> Note | None:
        try:
            return self.store.load(namespace, key, path, state)
        except FileNotFoundError:  # forgotten by another process meanwhile: simply gone
            return None
        except (NoteFormatError, OSError) as exc:
            self.problems.setdefault(namespace, []).append(Problem(Path(path), str(exc)))
            return None

    def apply(self, namespace: str, key: str, change: Change) -> None:
        """Record this process's own write or forget without rescanning the namespace: if
        the index was current right before the change, it is current after it."""
        with self._lock, self._db:
            for (row_id,) in self._db.execute(
                "SELECT id FROM notes WHERE namespace = ? AND key = ?", (namespace, key)
            ).fetchall():
                self._delete(row_id)
            if change.note is not None and change.state is not None:
                self._insert(change.note, change.state)
            if self._seen.get(namespace) == change.before:
                self._seen[namespace] = (change.generation, change.folder_mtime_ns)

    def _insert(self, note: Note, state: FileState) -> None:
        cursor = self._db.execute(_INSERT, _row(note, state))
        self._db.execute(
            "INSERT INTO notes_fts(rowid, key, description, content, nsid) VALUES (?, ?, ?, ?, ?)",
            (
                cursor.lastrowid,
                note.key,
                note.description,
                note.content,
                namespace_id(note.namespace),
            ),
        )

    def _delete(self, row_id: int) -> None:
        row = self._db.execute(
            "SELECT key, description, content, nsid FROM notes WHERE id = ?", (row_id,)
        ).fetchone()
        if row is None:
            return
        self._db.execute(
            "INSERT INTO notes_fts(notes_fts, rowid, key, description, content, nsid) "
            "VALUES ('delete', ?, ?, ?, ?, ?)",
            (row_id, *row),
        )
        self._db.execute("DELETE FROM notes WHERE id = ?", (row_id,))

    def all_problems(self) -> list[Problem]:
        return [p for problems in self.problems.values() for p in problems]

    # -- queries ------------------------------------------------------------------------------

    def search(self, text: str, namespaces: list[str], limit: int = 10) -> list[Hit]:
        words = fts_query(text)
        if words is None or not namespaces:
            return []
        narrowed = " OR ".join(namespace_id(ns) for ns in namespaces)
        query = f"nsid:({narrowed}) AND {{key description content}}:({words})"
        marks = ",".join("?" * len(namespaces))
        with self._lock:
            rows = self._db.execute(
                f"SELECT n.namespace, n.key, n.kind, n.description, n.summary, n.updated, "
                f"snippet(notes_fts, 2, '', '', '…', 16) "
                f"FROM notes_fts JOIN notes n ON n.id = notes_fts.rowid "
                f"WHERE notes_fts MATCH ? AND n.namespace IN ({marks}) "
                f"ORDER BY bm25(notes_fts) LIMIT ?",
                (query, *namespaces, limit),
            ).fetchall()
        return [Hit(Entry(*row[:6]), row[6]) for row in rows]

    def entries(self, namespace: str, *, kind: str = "note") -> list[Entry]:
        """A namespace's notes, newest first."""
        with self._lock:
            rows = self._db.execute(
                "SELECT namespace, key, kind, description, summary, updated FROM notes "
                "WHERE namespace = ? AND kind = ? ORDER BY updated DESC, key",
                (namespace, kind),
            ).fetchall()
        return [Entry(*row) for row in rows]

    def counts(self) -> dict[tuple[str, str], int]:
        """(namespace, kind) -> how many."""
        with self._lock:
            rows = self._db.execute(
                "SELECT namespace, kind, count(*) FROM notes GROUP BY namespace, kind"
            ).fetchall()
        return {(ns, kind): n for ns, kind, n in rows}

    def close(self) -> None:
        self._db.close()


_INSERT = (
    "INSERT INTO notes (namespace, key, kind, description, summary, content, updated, size, "
    "mtime_ns, ino, ctime_ns, nsid) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


def _row(note: Note, state: FileState) -> tuple[object, ...]:
    return (
        note.namespace,
        note.key,
        note.kind,
        note.description,
        note.summary,
        note.content,
        note.updated,
        state.size,
        state.mtime_ns,
        state.ino,
        state.ctime_ns,
        namespace_id(note.namespace),
    )
