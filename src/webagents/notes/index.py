"""The full-text index of the notes (M9): SQLite FTS5, rebuilt from the files at start.

The files stay the truth. The index follows them: every query first checks the generation of
the namespaces it reads (bumped by every write, in any process) and the folders' mtimes (for
files added or removed by hand), and rescans a namespace that changed. A rescan parses only
the files whose state (size, mtime, inode, ctime) differs from what was indexed. Files edited
in place change neither: each namespace's files are checked again once they are a second old,
within a time budget per query. This process's own writes are recorded as they are made and
taken in by the next query, all of them in one transaction (`record`).

User text never reaches FTS5's query syntax: a query is split into words and each is matched
as a quoted phrase, and the namespaces a caller may read are bound parameters.

The index does not hold the notes' text in memory: its database lives in a working file
(`index_db`: the schema, that file and the cache copy of it between starts), and a start reads
the files in batches bounded in bytes. The operating system's file cache keeps it quick.
Where that file cannot grow at a start (a full disk), the index is kept in memory instead.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import re
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from .index_db import SCHEMA, Descriptor, is_current, save_copy, working_database
from .layout import is_key
from .note_file import FileState, Note, NoteFormatError, Problem, read_written
from .store import Change, NoteStore

log = logging.getLogger("webagents.memory")

_WORD = re.compile(r"\w+", re.UNICODE)
MAX_QUERY_WORDS = 32
RECHECK_SECONDS = 1.0
"""When a namespace is next due to be checked file by file, for files edited in place (which
change neither its generation nor its folder): this long after its last check. Within the
budget below, so with many namespaces due (the owner's queries) an in-place edit may wait
for as many queries as there are namespaces due before it."""
MAX_WAITING = 64
"""Recorded writes taken in by the write that makes this many, when no query came first."""
RECHECK_BUDGET_SECONDS = 0.02
"""How long one query spends at most on those checks: the namespaces checked longest ago go
first (at least one), the rest at the next queries. So a query over every namespace (the
owner's) costs a bounded amount, not a stat of every note. A namespace not yet checked since
the start, or with a note added or removed, is always checked before it is read."""


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
        self._db: sqlite3.Connection
        self._file: Descriptor | None
        """This index's own descriptor of its working file (to copy it to the cache)."""
        self._db, self._file = working_database(cache)
        self._db.executescript(SCHEMA)
        self._in_memory = False
        """Where the index could not work in a file, it is an in-memory database instead."""
        self._lock = threading.RLock()
        self._seen: dict[str, tuple[int, int]] = {}
        self._checked: dict[str, float] = {}
        self._waiting: list[tuple[str, str, Change]] = []
        self.problems: dict[str, list[Problem]] = {}

    # -- keeping up with the files ----------------------------------------------------------

    def rebuild(self) -> None:
        """Index every note of every namespace, as the agent starts.

        With a cache file from an earlier start, its rows are reused: a namespace whose
        generation and folder are unchanged keeps them until its files are checked (size,
        mtime, inode, ctime) before it is first read, and the others are reconciled now;
        without one, every file is read (`_build`). Either way the files are the truth.
        """
        with self._lock:
            try:
                changed = self._start()
            except sqlite3.OperationalError as exc:  # a full disk, say: the agent still starts
                if self._in_memory:
                    raise
                log.warning(
                    "memory: the index cannot work in a file (%s): it is kept in memory until "
                    "the next start",
                    exc,
                )
                self._in_memory = True
                changed = self._start()
            if changed:
                self._save_cache()
        for problem in self.all_problems():
            log.warning("memory: %s (left as it is)", problem)

    def _start(self) -> bool:
        """The work of `rebuild` (under the lock); whether the cache is to be written."""
        reused = self._load_cache()
        changed = not reused
        with self._db:
            self._seen.clear()
            self._waiting.clear()  # their files are read like any other
            self._checked.clear()
            self.problems.clear()
            present = self.store.namespaces()
            if reused:
                removed = self._db.execute(
                    f"DELETE FROM notes WHERE namespace NOT IN ({','.join('?' * len(present))})",
                    present,
                ).rowcount
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
                changed = changed or bool(removed)
            else:
                self._build(present)
            self._db.execute("DELETE FROM seen")
            self._db.executemany(
                "INSERT INTO seen VALUES (?, ?, ?)",
                [(ns, *state) for ns, state in self._seen.items()],
            )
        return changed

    def _build(self, namespaces: list[str]) -> None:
        """Read every file of `namespaces` into the empty index.

        The rows go in batch by batch, and each batch's full-text entries are made by a
        second thread while this one reads the next batch: SQLite does that work without
        Python's lock, so a start uses two cores. (One statement per batch: the second thread
        takes Python's lock only to start it.)
        """
        with ThreadPoolExecutor(1, thread_name_prefix="webagents-memory-index") as fts:
            indexing: Future[object] | None = None
            for rows in self._read_batches(namespaces):  # read while the last batch indexes
                if indexing is not None:
                    indexing.result()  # the connection is free again
                first_id = self._last_id()
                self._db.executemany(_INSERT, rows)
                indexing = fts.submit(self._db.execute, _INDEX_RANGE, (first_id, self._last_id()))
            if indexing is not None:
                indexing.result()

    def _read_batches(self, namespaces: list[str]) -> Iterator[list[tuple[object, ...]]]:
        rows: list[tuple[object, ...]] = []
        size = 0
        for namespace in namespaces:
            state = self.state(namespace)  # before reading: a change meanwhile shows later
            for key, path in self.store.names(namespace):
                # The form the agent writes is read the quick way; anything else (or a bad
                # key) the careful way, which reports what cannot be read.
                loaded = read_written(namespace, key, path) if is_key(key) else None
                if loaded is None:
                    loaded = self._load(namespace, key, path)
                    if loaded is None:
                        continue
                rows.append(_row(*loaded))
                size += len(loaded[0].content)
                # Within a namespace too (the owner's may hold most notes), and bounded in
                # bytes as well as rows: a batch is in memory until SQLite has it.
                if len(rows) >= _BATCH or size >= _BATCH_CHARS:
                    yield rows
                    rows, size = [], 0
            self._seen[namespace] = state
            self._checked[namespace] = time.monotonic()
        if rows:
            yield rows

    def _last_id(self) -> int:
        return int(self._db.execute("SELECT max(id) FROM notes").fetchone()[0] or 0)

    def _load_cache(self) -> bool:
        """Start from a copy of the cache file when there is a usable one; False for an empty
        index."""
        self.close()
        if self._in_memory:
            self._db = sqlite3.connect(":memory:", check_same_thread=False)
        elif self.cache is not None and self.cache.exists():
            try:
                self._db, self._file = working_database(self.cache, copy_of=self.cache)
                if is_current(self._db):
                    return True
            except (OSError, sqlite3.Error) as exc:
                log.warning("memory: the index cache %s cannot be used (%s)", self.cache, exc)
            self.close()
        if not self._in_memory:
            self._db, self._file = working_database(self.cache)
        self._db.executescript(SCHEMA)
        return False

    def _save_cache(self) -> None:
        """Keep the index beside the notes for the next start (0600: it holds their text):
        a copy of the working file, which holds all that was committed (nothing is pending:
        `rebuild` holds the lock)."""
        if self.cache is None:
            return
        assert not self._db.in_transaction
        save_copy(self._db, self._file, self.cache)

    def refresh(self, namespaces: Iterable[str]) -> None:
        """Rescan each of `namespaces` that changed since it was last indexed, and check
        the files of those due for it within the budget (RECHECK_BUDGET_SECONDS)."""
        with self._lock:
            self._catch_up()
        now = time.monotonic()
        due = []
        for namespace in namespaces:
            state = self.state(namespace)
            checked = self._checked.get(namespace)
            if checked is None or self._seen.get(namespace) != state:
                self._rescan(namespace, state)
            elif now - checked > RECHECK_SECONDS:
                due.append((checked, namespace, state))
        due.sort()
        deadline = time.monotonic() + RECHECK_BUDGET_SECONDS
        for _, namespace, state in due:
            self._rescan(namespace, state)
            if time.monotonic() >= deadline:
                break

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
            row[0]: row  # key, id, then the file's state as it was indexed
            for row in self._db.execute(
                "SELECT key, id, size, mtime_ns, ino, ctime_ns FROM notes WHERE namespace = ?",
                (namespace,),
            )
        }
        files = self.store.files(namespace)
        reported = set(self.problems.get(namespace, []))
        self.problems[namespace] = []
        for key, known in indexed.items():
            if key not in files:
                self._delete(known[1])
        for key, (path, file_state) in files.items():
            known = indexed.get(key)
            if known is not None and known[2:] == file_state:
                continue
            loaded = self._load(namespace, key, path)
            if known is not None:
                self._delete(known[1])
            if loaded is not None:
                self._insert(*loaded)
        for problem in self.problems[namespace]:
            if problem not in reported:
                log.warning("memory: %s (left as it is)", problem)
        self._seen[namespace] = state
        self._checked[namespace] = time.monotonic()

    def _load(self, namespace: str, key: str, path: str) -> tuple[Note, FileState] | None:
        try:
            return self.store.load(namespace, key, path)
        except FileNotFoundError:  # forgotten by another process meanwhile: simply gone
            return None
        except (NoteFormatError, OSError) as exc:
            self.problems.setdefault(namespace, []).append(Problem(Path(path), str(exc)))
            return None

    def record(self, namespace: str, key: str, change: Change) -> None:
        """This process's own write or forget, whose file is already durable. It is taken in
        at the next query (every query first takes in what is waiting, so a note is found at
        once), with whatever else was written meanwhile, in one transaction: the write does
        not wait for the full-text index, and a burst of writes costs one commit."""
        with self._lock:
            self._waiting.append((namespace, key, change))
            if len(self._waiting) >= MAX_WAITING:
                self._catch_up()

    def _catch_up(self) -> None:
        """Take in the recorded writes (under the lock). Each is applied without rescanning
        its namespace: if the index was current right before it, it is current after it."""
        if not self._waiting:
            return
        waiting, self._waiting = self._waiting, []
        last = {(namespace, key): n for n, (namespace, key, _) in enumerate(waiting)}
        advanced: dict[str, tuple[int, int]] = {}
        crossed: set[str] = set()
        try:
            with self._db:
                for n, (namespace, key, change) in enumerate(waiting):
                    if last[namespace, key] == n:  # a key written twice: its last version
                        self._db.execute(
                            "DELETE FROM notes WHERE namespace = ? AND key = ?", (namespace, key)
                        )
                        if change.note is not None and change.state is not None:
                            self._insert(change.note, change.state)
                    if advanced.get(namespace, self._seen.get(namespace)) == change.before:
                        advanced[namespace] = (change.generation, change.folder_mtime_ns)
                    else:  # another writer came between (or the index was not current)
                        crossed.add(namespace)
        except sqlite3.Error:
            # The files are written, and the namespaces' states were not advanced: the next
            # query rescans them from the files.
            log.exception("memory: the index could not take in %d writes", len(waiting))
            return
        self._seen.update(advanced)
        for namespace in crossed:  # its rows may be older than its files: read it again
            self._seen.pop(namespace, None)

    def _insert(self, note: Note, state: FileState) -> int:
        row_id = self._db.execute(_INSERT, _row(note, state)).lastrowid
        assert row_id is not None
        self._db.execute(
            "INSERT INTO notes_fts(rowid, key, description, content, nsid) VALUES (?, ?, ?, ?, ?)",
            (row_id, note.key, note.description, note.content, namespace_id(note.namespace)),
        )
        return row_id

    def _delete(self, row_id: int) -> None:
        self._db.execute("DELETE FROM notes WHERE id = ?", (row_id,))  # the trigger: notes_fts

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
            self._catch_up()
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
            self._catch_up()
            rows = self._db.execute(
                "SELECT namespace, key, kind, description, summary, updated FROM notes "
                "WHERE namespace = ? AND kind = ? ORDER BY updated DESC, key",
                (namespace, kind),
            ).fetchall()
        return [Entry(*row) for row in rows]

    def counts(self) -> dict[tuple[str, str], int]:
        """(namespace, kind) -> how many."""
        with self._lock:
            self._catch_up()
            rows = self._db.execute(
                "SELECT namespace, kind, count(*) FROM notes GROUP BY namespace, kind"
            ).fetchall()
        return {(ns, kind): n for ns, kind, n in rows}

    def close(self) -> None:
        self._db.close()
        if self._file is not None:
            self._file.close()
            self._file = None


_BATCH = 4096
_BATCH_CHARS = 1 << 18
"""A start's batch ends at this many characters of text too: a batch is held in Python until
SQLite has it, and FTS5 keeps a statement's terms in memory until it ends (a few bytes for
each character)."""
_INDEX_RANGE = (
    "INSERT INTO notes_fts (rowid, key, description, content, nsid) "
    "SELECT id, key, description, content, nsid FROM notes WHERE id > ? AND id <= ?"
)
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
        *state,
        namespace_id(note.namespace),
    )
