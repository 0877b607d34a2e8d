"""The pull half of the portal sync (P7): the portal's changes written here.

Each namespace's changes after its cursor, written through the same store code as the tools'
writes (rights, atomic writes, the index), never over a file that cannot be read (reported
instead) and never over a local change not yet pushed: such a change goes to the outbox, and
its push settles it against the portal's (`push`). A page's notes are made durable
together (`note_batch.write_many`) and only then is the page's cursor saved: a crash mid-pull
pulls the page again, which changes nothing written. Every line is checked against rights.py
(`synced`) and written only into its own namespace's folder.

`Puller.apply_put` is also how the push writes the portal's note here when a conflict keeps
the portal's as current.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from ...errors import ToolError
from ...notes.index import MemoryIndex
from ...notes.layout import EPISODE_PREFIX, is_key
from ...notes.note_batch import Write, write_many
from ...notes.note_file import Note, NoteFormatError
from ...notes.store import NoteChanged, NoteStore
from ...portal_wire.memory import EntryOut, SyncAnswer, SyncLine
from ...rights import synced
from ..client import PortalClient
from ..errors import BadCursor
from .files import (
    SyncFiles,
    SyncState,
    entry_id,
    local_time,
    portal_hash,
    put_line,
)

log = logging.getLogger("webagents.memory")

ALL = "*"
"""The cursor of the pull of every namespace at once."""
PAGE = 1000
"""Changes asked for a pull page (the most the portal gives): each page's notes are written
together and made durable with two flushes (`note_batch.write_many`)."""

Batch = dict[str, tuple[Write, str]]
"""A page's notes still to write, by entry id, each with its content hash."""


def _as_read(local: str | None) -> Callable[[Note | None], bool]:
    """The compare-and-swap of a pull's write: the note is still as `_local` read it (its
    content hash, or None: no note), checked under the note store's lock."""
    return lambda note: (portal_hash(note.content) if note is not None else None) == local


class Puller:
    """The portal's changes into one agent's notes; `wake` asks for a round soon (a change
    found here goes to the outbox, to be pushed)."""

    def __init__(
        self, store: NoteStore, index: MemoryIndex, files: SyncFiles, wake: Callable[[], None]
    ) -> None:
        self.store = store
        self.index = index
        self.files = files
        self.wake = wake

    def pull(self, client: PortalClient, state: SyncState, namespaces: list[str] | None) -> None:
        """Each namespace's changes after its cursor; None: every namespace of the agent's
        store at once (the background's pull: callers' namespaces first written elsewhere
        included), under a cursor of its own. Every line is checked against rights.py
        (`synced`) and against the namespace asked for, and written only into its own
        namespace's folder. Pulls overlap harmlessly: a line already here changes nothing."""
        waiting = {
            entry_id(str(c.get("namespace")), str(c.get("key")))
            for _, c in self.files.pending(state.offset)
        }
        targets: list[str | None] = [None] if namespaces is None else list(namespaces)
        for namespace in targets:
            if namespace is not None and not synced(namespace):
                continue
            where = namespace if namespace is not None else ALL
            while True:
                page = self._page(client, state, namespace, where)
                lines = page.lines
                batch: Batch = {}
                for line in lines:
                    if synced(line.namespace) and namespace in (None, line.namespace):
                        self._apply(state, line, waiting, batch)
                self._write(state, batch)
                cursor = page.cursor
                if cursor is not None:
                    state.cursors[where] = cursor
                if lines:  # once a page, after its notes are durable: a crash re-pulls it
                    self.files.save(state)
                if cursor is None and lines:
                    log.warning(
                        "memory: the portal answered the pull of %s without a cursor (%r): "
                        "it is pulled again from the last cursor kept at the next round",
                        where,
                        page.cursor,
                    )
                    break  # the same page again would never end
                if not page.more or not lines:
                    break

    def _page(
        self, client: PortalClient, state: SyncState, namespace: str | None, where: str
    ) -> SyncAnswer:
        """A page after the kept cursor; from the start when the portal does not know that
        cursor (another portal's, or damaged): a line already here changes nothing."""
        try:
            return client.memory_sync_pull(namespace, state.cursors.get(where), PAGE)
        except BadCursor as exc:
            log.warning("memory: %s; the pull of %s starts again from the start", exc, where)
            state.cursors.pop(where, None)
            return client.memory_sync_pull(namespace, None, PAGE)

    def _write(self, state: SyncState, batch: Batch) -> None:
        """A page's notes written together (`note_batch.write_many`), then indexed."""
        if not batch:
            return
        writes = [write for write, _ in batch.values()]
        changes = write_many(self.store, writes)
        for (ident, (write, sha)), change in zip(batch.items(), changes, strict=True):
            if isinstance(change, NoteChanged):  # written here since it was read
                self._changed_here(state, write.namespace, write.key)
                continue
            if isinstance(change, Exception):
                log.warning(
                    "memory: the portal's %s/%s was not written here: %s",
                    write.namespace,
                    write.key,
                    change,
                )
                continue
            self.index.record(write.namespace, write.key, change)
            state.bases[ident] = sha
        batch.clear()

    def _apply(self, state: SyncState, line: SyncLine, waiting: set[str], batch: Batch) -> None:
        namespace, key = line.namespace, line.key
        if not is_key(key):
            log.warning(
                "memory: the portal sent a note %r in %s whose key is not valid here: skipped",
                key,
                namespace,
            )
            return
        ident = entry_id(namespace, key)
        if ident in waiting:
            return  # a change here is still to be pushed: its push settles it
        if ident in batch:  # the key again in this page: its earlier line written first
            self._write(state, batch)
        if line.op == "delete":
            self._apply_delete(state, namespace, key)
        else:
            self.apply_put(state, line, portal_hash(line.content or ""), batch=batch)

    def _local(self, namespace: str, key: str) -> tuple[bool, str | None]:
        """(readable, content hash or None when there is no note)."""
        try:
            note = self.store.read(namespace, key)
        except NoteFormatError as exc:
            where = self.store.folder(namespace) / f"{key}.md"
            log.warning(
                "memory: %s cannot be read (%s): the portal's change is not written "
                "over it (left as it is)",
                where,
                exc,
            )
            return False, None
        return True, portal_hash(note.content) if note is not None else None

    def apply_put(
        self,
        state: SyncState,
        line: SyncLine | EntryOut,
        sha: str,
        *,
        force: bool = False,
        batch: Batch | None = None,
    ) -> None:
        """Write the portal's note here, a pull's line or the entry of a conflict the portal's
        side won (into `batch`, written at the page's end, if given); `force`: over a change
        here too (that conflict)."""
        namespace, key = line.namespace, line.key
        ident = entry_id(namespace, key)
        readable, local = self._local(namespace, key)
        if not readable:
            return
        if local == sha:
            state.bases[ident] = sha
            return
        if local is not None and local != state.bases.get(ident) and not force:
            self._changed_here(state, namespace, key)
            return
        kind = "episode" if key.startswith(EPISODE_PREFIX) else "note"
        write = Write(
            namespace,
            key,
            line.content or "",
            line.description or "",
            kind,
            local_time(line.at if isinstance(line, SyncLine) else line.updated_at),
            _as_read(local),
        )
        if batch is not None:
            batch[ident] = (write, sha)
            return
        try:
            change = self.store.write(
                *write[:4], kind=kind, updated=write.updated, expect=write.expect
            )
        except NoteChanged:
            # Written here (a tool's write) since `_local` read it: that change is newer than
            # this look, so it is pushed and settled against the portal's like any other.
            self._changed_here(state, namespace, key)
            return
        except (ToolError, OSError) as exc:
            log.warning("memory: the portal's %s/%s was not written here: %s", namespace, key, exc)
            return
        self.index.record(namespace, key, change)
        state.bases[ident] = sha

    def _apply_delete(self, state: SyncState, namespace: str, key: str) -> None:
        ident = entry_id(namespace, key)
        readable, local = self._local(namespace, key)
        if not readable:
            return
        if local is not None and local != state.bases.get(ident):
            self._changed_here(state, namespace, key)
            return
        if local is not None:
            try:
                change = self.store.forget(namespace, key, expect=_as_read(local))
            except NoteChanged:
                self._changed_here(state, namespace, key)
                return
            except (ToolError, OSError) as exc:
                log.warning("memory: %s/%s was not forgotten here: %s", namespace, key, exc)
                return
            if change is not None:
                self.index.record(namespace, key, change)
        state.bases.pop(ident, None)

    def _changed_here(self, state: SyncState, namespace: str, key: str) -> None:
        """The file here changed since the last sync without going through the outbox (an
        edit by hand, or a write cut short by a crash before its outbox line): it is pushed,
        and the push settles it against the portal's change (a conflict: the later wins)."""
        note = self.store.read(namespace, key)
        if note is not None:
            self.files.append(
                put_line(namespace, key, note.content, note.description, note.updated)
            )
            self.wake()
