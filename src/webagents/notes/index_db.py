"""Where the memory index's SQLite database lives: its schema, the working file it is kept in
while the agent runs, and the cache copy of it kept between starts.

The index does not hold the notes' text in memory: the database lives in a working file of
its own beside the notes (0600, removed from the folder as soon as it is opened, so it goes
when the index closes or the process ends), read through a page cache of CACHE_MIB. The
cache file (`.index.sqlite`, 0600: it holds the notes' text) is a copy of that file, marked
with CACHE_VERSION. What is in the database, and when it is read or changed, is `index.py`'s.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import shutil
import sqlite3
from pathlib import Path

from .._files import ensure_private_dir

log = logging.getLogger("webagents.memory")

CACHE_VERSION = 4
"""Bumped whenever the schema below changes, so that an older cache file is not used."""
CACHE_MIB = 8
"""SQLite's page cache for the index: what it holds in memory of it at most (the rest is
read from its file, which the operating system caches), not the notes' whole text."""

SCHEMA = """
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
CREATE TRIGGER notes_deleted AFTER DELETE ON notes BEGIN
    INSERT INTO notes_fts (notes_fts, rowid, key, description, content, nsid)
    VALUES ('delete', old.id, old.key, old.description, old.content, old.nsid);
END;
"""


def working_database(
    cache: Path | None, *, copy_of: Path | None = None
) -> tuple[sqlite3.Connection, Descriptor | None]:
    """A new working database for an index, and a descriptor of its file: a file of its own
    beside the cache (0600, in the private memory folder), holding a copy of `copy_of` if
    given, and unlinked once SQLite and the descriptor have it open, so that it goes with
    the index (or the process) and no one else opens it. SQLite keeps at most CACHE_MIB of it
    in memory. Without a cache path (or where that folder cannot be written), SQLite's own
    private temporary file (unlinked too), and no descriptor."""
    path = None
    if cache is not None:
        try:
            ensure_private_dir(cache.parent)
            path = cache.with_name(f".{cache.name}.{secrets.token_hex(8)}.work")
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
        except OSError as exc:
            log.warning(
                "memory: the index works in a temporary file, as %s cannot be written (%s)",
                cache.parent,
                exc,
            )
            path = None
    db = None
    try:
        if path is not None and copy_of is not None:
            shutil.copyfile(copy_of, path)
        db = sqlite3.connect(path or "", check_same_thread=False)
        # No journal file (the database goes with the index; rollbacks still work), no
        # fsyncs, no memory mapping, and a bounded page cache.
        db.execute("PRAGMA journal_mode = MEMORY")
        db.execute("PRAGMA synchronous = OFF")
        db.execute("PRAGMA mmap_size = 0")
        db.execute(f"PRAGMA cache_size = -{CACHE_MIB * 1024}")
        file = None if path is None else Descriptor(os.open(path, os.O_RDONLY | os.O_NOFOLLOW))
    except BaseException:
        if db is not None:
            db.close()
        raise
    finally:
        if path is not None:
            with contextlib.suppress(OSError):
                os.unlink(path)
    return db, file


class Descriptor:
    """A file descriptor that is closed when dropped, as the index's connection is (an index
    need not be closed: a process may keep it to its end)."""

    __slots__ = ("fd",)

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def close(self) -> None:
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            os.close(fd)

    __del__ = close


def is_current(db: sqlite3.Connection) -> bool:
    """Whether a database (a copy of the cache) has this version's schema."""
    return bool(db.execute("PRAGMA user_version").fetchone()[0] == CACHE_VERSION)


def save_copy(db: sqlite3.Connection, file: Descriptor | None, cache: Path) -> None:
    """Keep the database at `cache` for the next start (0600): a copy of its working file
    `file`, which holds all that was committed (no transaction may be open); without one
    (SQLite's temporary file, or memory), through SQLite. Logged when it cannot be."""
    tmp = cache.with_name(f".{cache.name}.{os.getpid()}.tmp")
    try:
        ensure_private_dir(cache.parent)
        db.execute(f"PRAGMA user_version = {CACHE_VERSION}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        try:
            if file is not None:
                _copy(file.fd, fd)
                os.fsync(fd)
        finally:
            os.close(fd)
        if file is None:  # SQLite's temporary file, or memory: through SQLite
            target = sqlite3.connect(tmp)
            try:
                db.backup(target)
            finally:
                target.close()
        os.replace(tmp, cache)
    except (OSError, sqlite3.Error) as exc:
        log.warning("memory: the index cache %s was not written (%s)", cache, exc)
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def _copy(source: int, target: int) -> None:
    """The whole file `source` (from its start, wherever its offset is) onto `target`."""
    offset = 0
    while chunk := os.pread(source, 1 << 20, offset):
        offset += len(chunk)
        view = memoryview(chunk)
        while view:
            view = view[os.write(target, view) :]
