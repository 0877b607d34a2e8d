"""The portal's background jobs: the embedding queue's worker (memory/embedding_queue.py)
and the retention sweeper (memory/retention.py).

`webagents portal serve` runs them in its own process by default; with `--background-jobs
none` it leaves them to `webagents portal worker` processes started beside it. On PostgreSQL
any number of processes run them at once (a worker claims the entries it embeds, sweeps of
one agent take turns in the database), so embedding throughput grows with workers, and a
write in any process wakes every process's embedding worker (memory/wakes.py). On SQLite
one process runs them at a time, the one holding a lock on a file beside the database: a
second `portal worker` is refused with what to do, and a second `portal serve` (SQLite
portals may have several) stands by and takes the jobs over when the holder stops.
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import IO, Any

from sqlalchemy.orm import Session, sessionmaker

from ..errors import ConfigError
from .connect.notices import JobNotices
from .embeddings import Embedder
from .embeddings.apart import ApartEmbedder
from .embeddings.local import LocalEmbedder
from .memory import changes
from .memory.embedding_queue import EmbeddingWorker
from .memory.retention import Sweeper
from .memory.wakes import Wakes, Watch
from .settings import PortalSettings

log = logging.getLogger("webagents.portal")

WORKER_IDLE_S = 2.0
"""How often an embedding worker looks for notes unwoken (`portal worker --poll-seconds`).
Every process's writes wake it (memory/wakes.py: NOTIFY on PostgreSQL, the database's
data_version watched on SQLite), so the look is only the fallback for a wake lost (the
listener reconnecting, or its connection dead unnoticed for up to wakes.PING_AFTER_S; the
watch failing to read the file)."""


class JobsLock:
    """SQLite: the one process that runs the background jobs holds this (an exclusive lock on
    `<database>.jobs-lock`, released when the process ends, however it ends)."""

    def __init__(self, file: IO[bytes]) -> None:
        self._file = file

    @staticmethod
    def needed(settings: PortalSettings) -> bool:
        """Whether one process at a time runs the jobs (SQLite) or any number (PostgreSQL)."""
        return settings.is_sqlite and bool(settings.url.database)

    @staticmethod
    def try_take(settings: PortalSettings) -> JobsLock | None:
        """The lock on SQLite, if no other process holds it (None: another does)."""
        database = Path(str(settings.url.database))
        path = database.with_name(database.name + ".jobs-lock")
        file = os.fdopen(os.open(path, os.O_RDWR | os.O_CREAT, 0o600), "r+b")
        try:
            fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            file.close()
            return None
        return JobsLock(file)

    def release(self) -> None:
        self._file.close()  # closing the file releases the lock


TAKEN = (
    "another process runs this SQLite portal's background jobs already (`webagents portal "
    "serve` runs them unless started with --background-jobs none); on SQLite one process runs "
    "them: stop the other, or use PostgreSQL for several workers"
)


class Jobs:
    """The jobs in this process: embedding notes (when there is a model) and the sweeper."""

    def __init__(
        self,
        settings: PortalSettings,
        sessions: sessionmaker[Session],
        embedder: Embedder | None,
        *,
        idle: float,
        writers_turn: Callable[[], AbstractContextManager[object]] = nullcontext,
    ) -> None:
        self.embedding = (
            EmbeddingWorker(sessions, embedder, idle=idle, writers_turn=writers_turn)
            if embedder
            else None
        )
        self.sweeper = Sweeper(sessions)
        # Every process's writes wake the embedding worker (this process's too: a serving
        # process's own writes wake it twice, directly and so, which only ends a burst's
        # settle a little sooner).
        self._wakes = _wakes(settings, self.embedding.wake) if self.embedding else None

    def start(self) -> None:
        if self.embedding is not None:
            self.embedding.start()
        if self._wakes is not None:
            self._wakes.start()
        self.sweeper.start()

    def stop(self) -> None:
        if self._wakes is not None:
            self._wakes.stop()
        if self.embedding is not None:
            self.embedding.stop()
        self.sweeper.stop()


def _wakes(settings: PortalSettings, wake: Callable[[], None]) -> Wakes | Watch | None:
    """What tells this process's embedding worker of other processes' writes: on PostgreSQL
    their notifications, on SQLite the database file's data_version (none for a database
    without a file: one process holds it)."""
    if not settings.is_sqlite:
        return Wakes(settings.database_url, wake)
    if settings.url.database in (None, "", ":memory:"):
        return None
    return Watch(Path(str(settings.url.database)), wake)


class Worker:
    """`webagents portal worker`: the jobs in this process until `stop`; on SQLite refused
    (ConfigError, saying what to do) while another process runs them."""

    def __init__(
        self,
        settings: PortalSettings,
        sessions: sessionmaker[Session],
        embedder: Embedder | None,
        *,
        idle: float | None = None,
    ) -> None:
        """`idle`: how often the embedding worker looks for notes unwoken (WORKER_IDLE_S by
        default)."""
        self._lock = None
        if JobsLock.needed(settings):
            self._lock = JobsLock.try_take(settings)
            if self._lock is None:
                raise ConfigError(TAKEN)
        chosen = idle if idle is not None else WORKER_IDLE_S
        self.jobs = Jobs(settings, sessions, embedder, idle=chosen)
        self._stopped = threading.Event()
        # Retention's removals told to the agents' connections, held by the serving
        # processes (on SQLite there is no bus: the agents' next sync brings them).
        self._notices = None if settings.is_sqlite else JobNotices(sessions)
        self._stop_listening = (
            changes.listen(sessions, self._notices) if self._notices is not None else None
        )

    @property
    def embedded(self) -> int:
        return self.jobs.embedding.embedded if self.jobs.embedding is not None else 0

    def start(self) -> Worker:
        if self._notices is not None:
            self._notices.start()
        self.jobs.start()
        return self

    def wait(self, timeout: float | None = None) -> bool:
        """Until `stop` (True) or `timeout` seconds (False)."""
        return self._stopped.wait(timeout)

    def stop(self) -> None:
        self.jobs.stop()
        if self._stop_listening is not None and self._notices is not None:
            stop_listening, self._stop_listening = self._stop_listening, None
            stop_listening()
            self._notices.stop()
        if self._lock is not None:
            self._lock.release()
        self._stopped.set()


STANDBY_LOOK_S = 1.0  # how often a standing-by `portal serve` tries the SQLite lock


class ServingJobs:
    """`portal serve --background-jobs in-process`: the jobs in the serving process, its own
    writes waking the embedding worker (`app.state.embedding_worker`), the local model's
    batches run in a child process (embeddings/apart.py). On SQLite, while another process
    holds the jobs, it stands by and takes them over once that one stops."""

    def __init__(self, settings: PortalSettings, app: Any, *, idle: float = WORKER_IDLE_S) -> None:
        self._settings = settings
        self._app = app
        # The local model's batches in a process of their own (embeddings/apart.py); the
        # requests' queries stay with app.state.embedder.
        self._apart = ApartEmbedder() if isinstance(app.state.embedder, LocalEmbedder) else None
        embedder = self._apart or app.state.embedder
        self._jobs = Jobs(
            settings, app.state.sessions, embedder, idle=idle, writers_turn=app.state.writers_turn
        )
        self._lock: JobsLock | None = None
        self._started = False
        self._stop = threading.Event()
        self._standby: threading.Thread | None = None

    def start(self) -> str:
        """Start them, or stand by: the banner's line saying which."""
        if JobsLock.needed(self._settings):
            self._lock = JobsLock.try_take(self._settings)
            if self._lock is None:
                self._standby = threading.Thread(
                    target=self._stand_by, name="background-jobs-standby", daemon=True
                )
                self._standby.start()
                return (
                    "  background jobs: another process runs them now (a portal worker or "
                    "serve); this one takes them over if it stops"
                )
        self._begin()
        return "  background jobs: in this process (embedding notes, memory retention)"

    def _begin(self) -> None:
        self._jobs.start()
        self._app.state.embedding_worker = self._jobs.embedding
        self._started = True

    def _stand_by(self) -> None:
        while not self._stop.wait(STANDBY_LOOK_S):
            self._lock = JobsLock.try_take(self._settings)
            if self._lock is not None:
                log.warning("background jobs: the other process stopped; running them here")
                self._begin()
                return

    def stop(self) -> None:
        self._stop.set()
        if self._standby is not None:
            self._standby.join(timeout=30)
        if self._started:
            self._app.state.embedding_worker = None
            self._jobs.stop()
        if self._apart is not None:
            self._apart.close()
        if self._lock is not None:
            self._lock.release()
