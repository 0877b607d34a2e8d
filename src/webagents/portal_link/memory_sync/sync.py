"""`memory: {portal: true}` (M12, P7): the notes kept in the portal's memory store too, synced
with this machine entry by entry, in both directions.

`PortalSync` is the sync's one entry point: what the skill calls (a write, a forget, the
rounds, search, /memory's lines) and the background thread that runs the rounds. A round
pushes the outbox, then pulls, under one lock across the agent's processes.

- Every durable local write and forget is appended to the outbox (`files`) before it
  is acknowledged, and a round runs as soon as the portal answers. Offline, changes simply
  wait there.
- The push, exactly once in effect, and the conflicts it finds (the later change stays
  current, the other is kept as a version): `push`.
- The pull, never over a file that cannot be read nor over a change here not yet pushed:
  `pull`.
- Which namespaces are carried is rights.py's (`synced`); a conversation's search and its
  /memory see only what its `Rights` may read.
- A process's first round is awaited (briefly) before its first `## Memory` block is built,
  so that a fresh machine's first conversation shows the portal's notes (`first_round`); a
  one-shot run waits (briefly) for its writes to be pushed before it exits (`flush`).
- The thread is stopped and joined before the process exits (`close`, also at exit): one
  killed mid-write would leave its temporary file behind.
"""

from __future__ import annotations

import atexit
import logging
import threading
from collections.abc import Callable
from pathlib import Path

from ...errors import WebAgentsError
from ...notes.index import MemoryIndex
from ...notes.store import NoteStore
from ...portal_wire.memory import EntryOut, SearchAnswer
from ...rights import synced
from ..client import PortalClient
from ..errors import PortalUnreachable
from .files import PortalLink, SyncFiles, entry_id, now, put_line
from .pull import ALL, Puller
from .push import Pusher

log = logging.getLogger("webagents.memory")

UNREACHABLE = "the portal does not answer"
CLOSE_SECONDS = 30.0
"""How long a close waits for a round in progress: past the client's timeout (10 s) of each
request, so that a round ends between two files rather than in the middle of one."""


class PortalSync:
    """One agent's sync with its memory store in the portal."""

    def __init__(
        self,
        store: NoteStore,
        index: MemoryIndex,
        link: PortalLink,
        dot_webagents: Path,
        *,
        interval: float = 30.0,
        client: Callable[[], PortalClient] | None = None,
    ) -> None:
        self.store = store
        self.index = index
        self.link = link
        self.files = SyncFiles(dot_webagents)
        self.interval = interval
        self.connect = client or (lambda: PortalClient(link.url, link.key, timeout=10))
        self._wake = threading.Event()
        self._stop = threading.Event()
        self.puller = Puller(store, index, self.files, self._wake.set)
        self.pusher = Pusher(store, self.files, self.puller)
        self._thread: threading.Thread | None = None
        self._rounds = threading.Condition()
        self._began = 0
        self._ended = 0
        """Rounds of the thread begun and ended: what `flush` waits on."""
        self._first = threading.Event()
        """Set when the thread's first round ended, whatever its outcome."""
        self._unreachable = False
        self.last_error: str | None = None
        self._pulled: str | None = None
        """The cursor this process's last pull of every namespace reached."""

    # -- what the skill calls -------------------------------------------------------------------

    def wrote(self, namespace: str, key: str, content: str, description: str, at: str) -> None:
        """A durable local write: into the outbox (durably) before the write is acknowledged."""
        if synced(namespace):
            self.files.append(put_line(namespace, key, content, description, at))
            self._wake.set()

    def forgot(self, namespace: str, key: str) -> None:
        if synced(namespace):
            self.files.append({"op": "delete", "namespace": namespace, "key": key, "at": now()})
            self._wake.set()

    def start(self) -> None:
        """Sync now and then every `interval` seconds (and soon after each write), in a
        background thread: the conversation never waits for the portal."""
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(
                target=self._run, name="webagents-memory-sync", daemon=True
            )
            self._thread.start()
            # A daemon thread is stopped wherever it is when the interpreter ends: stopped
            # here first, between two files.
            atexit.register(self.close)

    def close(self) -> None:
        """Stop the thread, after the round in progress (what waits in the outbox stays)."""
        self._stop.set()
        self._wake.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            atexit.unregister(self.close)
            thread.join(timeout=CLOSE_SECONDS)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()  # before the round: a write during it brings the next at once
            with self._rounds:
                self._began += 1
            self.sync_round()
            with self._rounds:
                self._ended += 1
                self._rounds.notify_all()
            self._first.set()
            self._wake.wait(self.interval)

    def first_round(self, timeout: float) -> bool:
        """Wait, `timeout` seconds at most, for the thread's first round (its pull brings
        what the portal has before a fresh machine's first block is built); whether it ended
        with the portal answering."""
        return self._first.wait(timeout) and self.last_error is None

    def flush(self, timeout: float) -> int:
        """Push what waits in the outbox now, waiting `timeout` seconds at most for a round
        that began after this call; how many changes still wait (0: all in the portal)."""
        if self._thread is not None and self.waiting():
            with self._rounds:
                wanted = self._began + 1
                self._wake.set()
                self._rounds.wait_for(lambda: self._ended >= wanted, timeout)
        return self.waiting()

    def waiting(self) -> int:
        """How many changes of the outbox are not in the portal yet."""
        return len(self.files.pending(self.files.load().offset))

    def sync_round(self, namespaces: list[str] | None = None) -> bool:
        """Push the outbox, then pull `namespaces` (None: every namespace kept here and in
        the portal); whether the portal answered. Another process's round meanwhile: skipped."""
        try:
            with self.files.round() as mine:
                if not mine:
                    return True
                if not self.files.has_state():
                    self.pusher.seed()
                state = self.files.load()
                with self.connect() as client:
                    self.pusher.drain(client, state)
                    self.puller.pull(client, state, namespaces)
                if namespaces is None:
                    self._pulled = state.cursors.get(ALL)
                state.last_sync = now()
                self.files.save(state)
        except PortalUnreachable as exc:
            if not self._unreachable:
                log.warning(
                    "memory: the portal does not answer; changes wait in the outbox (%s)", exc
                )
            self._unreachable = True
            self.last_error = UNREACHABLE
            return False
        except WebAgentsError as exc:
            if str(exc) != self.last_error:  # once, not at every round
                log.error("memory: the portal sync failed: %s", exc)
            self.last_error = str(exc)
            return False
        except Exception:  # the thread must go on: the next round tries again
            log.exception("memory: the portal sync failed")
            self.last_error = "the sync failed (see the log)"
            return False
        if self._unreachable:
            log.info("memory: the portal answers again; the outbox was pushed")
        self._unreachable = False
        self.last_error = None
        return True

    # -- the other processes of the agent --------------------------------------------------------

    def changed_in_portal(self, cursor: str | None) -> None:
        """The portal said (Portal Connect) that the agent's memory changed, its feed now at
        `cursor` (None: it may have, as after a reconnect): a round at once, unless the last
        pull here reached that cursor already. The thread runs one round at a time, and a
        notice during a round brings one more after it (its wake is cleared before each)."""
        if cursor is not None and cursor == self._pulled:
            return
        self._wake.set()

    def read_through(self, namespaces: list[str], key: str) -> EntryOut | None:
        """The note `key` that this machine does not have, as the portal has it in the first
        of `namespaces` (the caller's, in rights' order) that does: another process of the
        agent may have written it since the last pull. None when none has it, where a change
        here still waits to be pushed (this machine's word stands until then), or when the
        portal does not answer (then nothing is waited for: the read says what is here). A
        round is woken to bring the note here."""
        carried = [namespace for namespace in namespaces if synced(namespace)]
        if not carried or self._unreachable:
            return None
        waiting = {
            entry_id(str(c.get("namespace")), str(c.get("key")))
            for _, c in self.files.pending(self.files.load().offset)
        }
        try:
            with self.connect() as client:
                for namespace in carried:
                    if entry_id(namespace, key) in waiting:
                        return None
                    found = client.memory_get(namespace, key)
                    if found is not None and found.namespace == namespace and found.key == key:
                        self._wake.set()
                        return found
        except WebAgentsError as exc:  # PortalUnreachable too: what is here is the answer
            log.info("memory: the portal was not asked for %r (%s)", key, exc)
        return None

    # -- what conversations see -------------------------------------------------------------

    def search(self, query: str, namespaces: list[str], limit: int = 10) -> SearchAnswer:
        """The portal's (semantic and full-text) results over `namespaces` only, which the
        caller's rights chose; raises PortalUnreachable and the client's errors."""
        with self.connect() as client:
            answer = client.memory_search(query, namespaces, limit=limit)
        allowed = set(namespaces)
        # Never anything else, whatever the portal says.
        kept = [hit for hit in answer.entries if hit.namespace in allowed]
        return answer.model_copy(update={"entries": kept})

    def report(self, namespaces: list[str]) -> list[str]:
        """/memory's lines about the sync; conflicts only of `namespaces` (the caller's)."""
        state = self.files.load()
        waiting = len(self.files.pending(state.offset))
        lines = [
            f"portal: {self.link.url} (synced entry by entry)",
            f"last sync: {state.last_sync or 'not yet'}"
            + (f" ({self.last_error})" if self.last_error else ""),
            f"waiting to be pushed: {waiting} change{'' if waiting == 1 else 's'}",
        ]
        allowed = set(namespaces)
        conflicts = [c for c in state.conflicts if c.get("namespace") in allowed]
        for c in conflicts[-5:]:
            lines.append(
                f"conflict on {c['key']} ({c['at']}): kept {c['kept']}'s as current; {c['other']}"
            )
        refused = [r for r in self.files.refused() if r["line"].get("namespace") in allowed]
        for r in refused[-5:]:
            lines.append(
                f"refused by the portal, not synced: {r['line'].get('key')} ({r.get('at')}): "
                f"{r.get('message')}"
            )
        return lines
