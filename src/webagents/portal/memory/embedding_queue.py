"""Embedding off the request path. The queue is the database itself: an entry is due when it
has no vector of the current model, or a vector made before its latest change (its cursor
differs). So any portal process can work the queue, and a restart loses nothing.

This is the store's one reader across agents, and it is no request's: it reads the text of
due entries and writes only vectors (and each agent's vectors version, which tells search
caches to reload). A worker thread in each serving process calls it; `embed_due` does one
round in one session (the tests call it directly).

The worker's idle look is cheap and takes no lock: it reads the agents' feed rows (one small
row each) in a read-only transaction (on SQLite a deferred BEGIN, which reads the WAL's
snapshot beside writers instead of queueing for the write lock as every write transaction
does), and looks for due entries only of agents whose feed moved past the cursor it last
checked them to, through the (agent_id, cursor) index. Every change takes the agent's next
cursor, so nothing becomes due without moving the feed; a new process, knowing no cursors,
checks each agent from cursor 0 once (so a restart, or a change of model, loses nothing).
"""

from __future__ import annotations

import logging
import threading
import uuid

from sqlalchemy.orm import Session, sessionmaker

from ..accounts.scope import SystemScope
from ..db.engine import read_only
from ..embeddings import Embedder
from .across_agents import BATCH, AcrossAgents, Due

log = logging.getLogger("webagents.portal.memory")


WORKER = SystemScope("embedding worker")


def embed_due(db: Session, embedder: Embedder, limit: int = BATCH) -> int:
    """One round in one session: how many entries got a vector."""
    queue = AcrossAgents(db, WORKER)
    items = queue.due(embedder.name, limit)
    if not items:
        return 0
    vectors = embedder.embed([item.text for item in items])
    queue.keep_vectors(embedder.name, list(zip(items, vectors, strict=True)))
    return len(items)


SETTLE_S = 0.2  # after a wake, how long writes may gather before they are embedded


class EmbeddingWorker:
    """A thread that works the queue: it reads due entries in one short read-only
    transaction, embeds them outside any transaction, and stores the vectors in another. A
    write in this process wakes it (after its commit); otherwise it looks again every `idle`
    seconds (writes of other processes), reading only the feed rows when nothing changed.

    A wake is debounced: the worker waits `settle` seconds, or until `enough` writes woke it,
    before it looks. Running the model at once for each note would take the CPU from the
    requests that follow (a client writing a burst of notes), and one batch of many notes
    costs little more than a batch of one. Nothing waits in memory: the queue stays the
    database, so a stop during the wait loses nothing."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        embedder: Embedder,
        *,
        idle: float = 2.0,
        settle: float = SETTLE_S,
        enough: int = BATCH,
    ) -> None:
        self._sessions = sessions
        self._embedder = embedder
        self._idle = idle
        self._settle = settle
        self._enough = enough
        self._pending = 0  # wakes since the last look
        self._lock = threading.Lock()
        self._full = threading.Event()  # `enough` wakes came: stop waiting
        # Per agent, the cursor up to which this process found every entry embedded: only
        # changes after it are looked at. Empty at start: every agent is checked from 0.
        self._checked: dict[uuid.UUID, int] = {}
        self._last_served: uuid.UUID | None = None
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="memory-embedding", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def wake(self) -> None:
        with self._lock:
            self._pending += 1
            if self._pending >= self._enough:
                self._full.set()
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._full.set()
        self._wake.set()
        self._thread.join(timeout=30)

    def run_once(self) -> int:
        """One batch of one agent's due entries embedded and stored: how many."""
        agent, items = self._next_batch()
        if agent is None or not items:
            return 0
        vectors = self._embedder.embed([item.text for item in items])
        with self._sessions() as session:
            done = list(zip(items, vectors, strict=True))
            AcrossAgents(session, WORKER).keep_vectors(self._embedder.name, done)
            session.commit()
        # The batch was this agent's first due entries by cursor: every entry up to the last
        # of them is embedded now, or changed since (its cursor is past this one then).
        self._checked[agent] = max(self._checked.get(agent, 0), max(i.cursor for i in items))
        self._last_served = agent
        return len(items)

    def _next_batch(self) -> tuple[uuid.UUID | None, list[Due]]:
        with read_only(self._sessions()) as session:
            queue = AcrossAgents(session, WORKER)
            moved = sorted(
                (agent, last)
                for agent, last in queue.feeds().items()
                if last > self._checked.get(agent, 0)
            )
            # Agents in turn after the one served last, so a busy agent starves none.
            after = [n for n, (agent, _) in enumerate(moved) if agent == self._last_served]
            if after:
                moved = moved[after[0] + 1 :] + moved[: after[0] + 1]
            for agent, last in moved:
                since = self._checked.get(agent, 0)
                items = queue.due(self._embedder.name, agent_id=agent, since=since)
                if items:
                    return agent, items
                # None due after `since`: every change up to `last` (committed, as cursors
                # are given in commit order) has its vector.
                self._checked[agent] = last
            return None, []

    def _run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            self._wake.clear()  # a write from now on brings another round at once
            try:
                done = self.run_once()
                failures = 0
            except Exception:
                failures += 1
                if failures == 1:
                    log.warning("embedding notes failed; retrying", exc_info=True)
                done = 0
            if done:
                continue
            wait = self._idle * min(2**failures, 32)  # back off while the model fails
            if self._wake.wait(wait):
                self._full.wait(self._settle)  # let a burst of writes join one batch
            with self._lock:
                self._pending = 0
                self._full.clear()
