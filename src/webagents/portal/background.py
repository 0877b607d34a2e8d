"""The portal's background jobs: the embedding queue's worker (memory/embedding_queue.py)
and the retention sweeper (memory/retention.py).

`webagents portal serve` runs them in its own process by default; with `--background-jobs
none` it leaves them to `webagents portal worker` processes started beside it. On PostgreSQL
any number of workers share them (a worker claims the entries it embeds, sweeps of one agent
take turns in the database), so embedding throughput grows with workers. On SQLite one
process runs them at a time: it holds a lock on a file beside the database, and a second
process that asks for them is refused with what to do.
"""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path
from typing import IO

from sqlalchemy.orm import Session, sessionmaker

from ..errors import ConfigError
from .embeddings import Embedder
from .memory.embedding_queue import EmbeddingWorker
from .memory.retention import Sweeper
from .settings import PortalSettings

WORKER_IDLE_S = 0.5
"""How often a worker process looks for notes written by the serving processes (it is not
woken by their writes; the look reads one small row per agent)."""


class JobsLock:
    """SQLite: the one process that runs the background jobs holds this (an exclusive lock on
    `<database>.jobs-lock`, released when the process ends, however it ends)."""

    def __init__(self, file: IO[bytes]) -> None:
        self._file = file

    @staticmethod
    def take(settings: PortalSettings, *, serving: bool) -> JobsLock | None:
        """The lock, on SQLite (None on PostgreSQL: no lock needed); ConfigError if another
        process holds it, saying what to do (`serving`: asked by `portal serve`)."""
        if not settings.is_sqlite or not settings.url.database:
            return None
        path = Path(settings.url.database).with_name(
            Path(settings.url.database).name + ".jobs-lock"
        )
        file = os.fdopen(os.open(path, os.O_RDWR | os.O_CREAT, 0o600), "r+b")
        try:
            fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            file.close()
            raise ConfigError(_taken(serving)) from None
        return JobsLock(file)

    def release(self) -> None:
        self._file.close()  # closing the file releases the lock


def _taken(serving: bool) -> str:
    if serving:
        return (
            "another process runs this SQLite portal's background jobs (embedding notes, "
            "retention): a `webagents portal worker`, or another `webagents portal serve`. "
            "Start this one with --background-jobs none, or stop the other"
        )
    return (
        "another process runs this SQLite portal's background jobs already (`webagents "
        "portal serve` runs them unless started with --background-jobs none); on SQLite one "
        "process runs them: stop the other, or use PostgreSQL for several workers"
    )


class Worker:
    """`webagents portal worker`: the jobs in this process until `stop`."""

    def __init__(
        self,
        settings: PortalSettings,
        sessions: sessionmaker[Session],
        embedder: Embedder | None,
        *,
        idle: float = WORKER_IDLE_S,
    ) -> None:
        self._lock = JobsLock.take(settings, serving=False)
        self.embedding = EmbeddingWorker(sessions, embedder, idle=idle) if embedder else None
        self.sweeper = Sweeper(sessions)
        self._stopped = threading.Event()

    def start(self) -> Worker:
        if self.embedding is not None:
            self.embedding.start()
        self.sweeper.start()
        return self

    def wait(self, timeout: float | None = None) -> bool:
        """Until `stop` (True) or `timeout` seconds (False)."""
        return self._stopped.wait(timeout)

    def stop(self) -> None:
        if self.embedding is not None:
            self.embedding.stop()
        self.sweeper.stop()
        if self._lock is not None:
            self._lock.release()
        self._stopped.set()
