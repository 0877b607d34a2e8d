"""Embedding off the request path. The queue is the database itself: an entry is due when it
has no vector of the current model, or a vector made before its latest change (its cursor
differs). So any portal process can work the queue, and a restart loses nothing.

This is the store's one reader across agents, and it is no request's: it reads the text of
due entries and writes only vectors (and each agent's vectors version, which tells search
caches to reload). A worker thread in a serving process, or in `webagents portal worker`
processes (background.py), calls it; `embed_due` does one round in one session (the tests
call it directly). On PostgreSQL several workers share the queue: each claims the entries it
embeds (AcrossAgents.claim), so none is embedded twice at once and a worker that dies leaves
its batch due; on SQLite one process works it.

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
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

from sqlalchemy.orm import Session, sessionmaker

from ..db import dialect
from ..db.engine import read_only, trying_for_lock
from ..embeddings import Embedder
from ..scope import SystemScope
from .across_agents import BATCH, AcrossAgents

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


# After a wake, how long writes may gather before they are embedded: a note is searchable
# this much later at least. 50 ms gathers a client's burst into batches of several notes (a
# batch of 4 costs the model about what 4 notes of a batch of 32 do; one at a time, four
# times as much), and keeps a burst's notes searchable within 500 ms (bench/README.md).
SETTLE_S = 0.05


class EmbeddingWorker:
    """A thread that works the queue: it reads due entries in one short read-only
    transaction, embeds them outside any transaction, and stores the vectors in another. A
    write wakes it after its commit (this process's directly, other processes' through
    wakes.py); otherwise it looks again every `idle` seconds (a wake lost), reading only the
    feed rows when nothing changed.

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
        writers_turn: Callable[[], AbstractContextManager[object]] = nullcontext,
    ) -> None:
        """`writers_turn`: held while the vectors are stored (a serving process's turn among
        its requests' writers on SQLite: gate.DatabaseGate.thread_turn)."""
        self._sessions = sessions
        self._writers_turn = writers_turn
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
        self.embedded = 0  # entries embedded and stored by this worker, in all
        self._claiming: bool | None = None  # whether workers claim entries: known at first use
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
        for agent, last in self._moved():
            if self._shares_queue():
                done = self._claim_and_embed(agent, last)
            else:
                done = self._read_and_embed(agent, last)
            if done:
                self._last_served = agent
                self.embedded += done
                return done
        return 0

    def _shares_queue(self) -> bool:
        """On PostgreSQL, workers claim entries (several processes may work the queue:
        `webagents portal worker`); on SQLite one worker reads without a lock."""
        if self._claiming is None:
            with self._sessions() as session:
                self._claiming = dialect.is_postgresql(session)
        return self._claiming

    def _moved(self) -> list[tuple[uuid.UUID, int]]:
        """The agents whose feed moved past the cursor checked, each with its last cursor:
        in turn after the one served last, so that a busy agent starves none."""
        with read_only(self._sessions()) as session:
            feeds = AcrossAgents(session, WORKER).feeds()
        moved = sorted(
            (agent, last) for agent, last in feeds.items() if last > self._checked.get(agent, 0)
        )
        after = [n for n, (agent, _) in enumerate(moved) if agent == self._last_served]
        if after:
            moved = moved[after[0] + 1 :] + moved[: after[0] + 1]
        return moved

    def _read_and_embed(self, agent: uuid.UUID, last: int) -> int:
        """One worker alone (SQLite): the batch read in a read-only transaction, embedded
        outside any, stored in a short writing one (the database's one writer lock is never
        held while the model runs)."""
        since = self._checked.get(agent, 0)
        with read_only(self._sessions()) as session:
            items = AcrossAgents(session, WORKER).due(
                self._embedder.name, agent_id=agent, since=since
            )
        if not items:
            # None due after `since`: every change up to `last` (committed, as cursors are
            # given in commit order) has its vector.
            self._checked[agent] = max(since, last)
            return 0
        vectors = self._embedder.embed([item.text for item in items])
        with self._writers_turn(), trying_for_lock(self._sessions()) as session:
            done = list(zip(items, vectors, strict=True))
            AcrossAgents(session, WORKER).keep_vectors(self._embedder.name, done)
            session.commit()
        # The batch was this agent's first due entries by cursor: every entry up to the last
        # of them is embedded now, or changed since (its cursor is past this one then).
        self._checked[agent] = max(since, max(item.cursor for item in items))
        return len(items)

    def _claim_and_embed(self, agent: uuid.UUID, last: int) -> int:
        """One of several workers (PostgreSQL): the batch claimed (AcrossAgents.claim: held
        by this transaction, those other workers hold skipped), embedded and stored in it, so
        no entry is embedded by two workers at once; a worker that dies leaves its batch due."""
        since = self._checked.get(agent, 0)
        with self._sessions() as session:
            queue = AcrossAgents(session, WORKER)
            claim = queue.claim(self._embedder.name, agent, since)
            if not claim.items:
                if claim.held_from is None:  # none due: see _read_and_embed
                    self._checked[agent] = max(since, last)
                return 0
            vectors = self._embedder.embed([item.text for item in claim.items])
            queue.keep_vectors(self._embedder.name, list(zip(claim.items, vectors, strict=True)))
            session.commit()
        # As in _read_and_embed, but the cursor stops before an entry another worker holds:
        # its batch may yet fail and stay due.
        reach = max(item.cursor for item in claim.items)
        if claim.held_from is not None:
            reach = min(reach, claim.held_from - 1)
        self._checked[agent] = max(since, reach)
        return len(claim.items)

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
