"""The push half of the portal sync (P7): the outbox sent to the portal, in order.

- Exactly once in effect: each push carries the `content_sha256` the portal had when this
  machine last saw the entry. An entry is idempotent by (namespace, key, content hash): a
  resend after a crash (pushed, but not yet marked pushed) is refused as stale (409), and the
  portal's entry then holds the very content (or a later line's of the same key) being sent,
  so it is counted as done and no second version is made.
- Conflicts (both sides changed an entry since the last sync: the precondition was stale and
  the portal holds neither this nor the base content): the later one (by its `at`) stays
  current, and the other is pushed first so the portal keeps it as a version; when the
  portal's wins it is written here (`Puller.apply_put`). The log and /memory say so. An edit
  beats a forget.
- A line the portal refuses for good (a 4xx no retry changes) is set aside, so the lines
  behind it go on; the refusals a later round may see otherwise stop the round, the line
  waiting in order (but for the forgets of other notes behind a write refused 429, which go
  ahead: they make the room the write waits for).
- The first round of a folder seeds the outbox with the notes already here.
"""

from __future__ import annotations

import logging
from typing import Any

from ...notes.layout import is_key
from ...notes.note_file import NoteFormatError
from ...notes.store import NoteStore
from ...portal_wire.memory import EntryOut
from ...portal_wire.times import wire_time
from ...rights import synced
from ..client import PortalClient
from ..errors import Refused, StaleEntry
from .files import (
    REFUSED,
    SyncFiles,
    SyncState,
    entry_id,
    now,
    portal_hash,
    put_line,
    when,
)
from .pull import Puller

log = logging.getLogger("webagents.memory")

SOURCE = "webagents"
SAVE_EVERY = 50
"""Pushed lines between saves of the state within a round (a crash in between resends
them, which the content hashes make harmless). A pull saves it once a page."""
RETRIED = frozenset({408, 409, 429})
"""The portal's refusals that a later round may see otherwise (too many requests, an entry
changed meanwhile): the line waits, in order. Any other 4xx is for good: the line is set
aside."""

SETTLED_AHEAD = "settled-ahead"
"""The base of a note whose forget went ahead of a waiting write and lost to the portal's
edit (recorded as a conflict then): its turn in the outbox sends nothing."""


class Pusher:
    """One agent's outbox pushed to its memory store in the portal; a conflict the portal's
    side wins is written here by `puller`."""

    def __init__(self, store: NoteStore, files: SyncFiles, puller: Puller) -> None:
        self.store = store
        self.files = files
        self.puller = puller

    def seed(self) -> None:
        """The first round of this folder: the notes already here (written before `portal:
        true`, or by hand) go to the outbox, so the portal gets them too. Pushed with the
        precondition that they are new there: the same content already there is no change,
        and other content is a conflict (the later stays current), never an overwrite."""
        waiting = {
            (c.get("namespace"), c.get("key"), c.get("sha256")) for _, c in self.files.pending(0)
        }
        lines = []
        for namespace in self.store.namespaces():
            if not synced(namespace):
                continue
            for key, path in self.store.names(namespace):
                try:
                    note, _ = self.store.load(namespace, key, path)
                except (NoteFormatError, OSError):
                    continue  # reported by the index; left as it is
                line = put_line(namespace, key, note.content, note.description, note.updated)
                if (namespace, key, line["sha256"]) not in waiting:
                    lines.append(line)
        self.files.append(*lines)
        self.files.save(SyncState())

    def drain(self, client: PortalClient, state: SyncState) -> None:
        """Push the outbox's lines after `state.offset`, in order."""
        pending = self.files.pending(state.offset)
        for n, (end, change) in enumerate(pending):
            namespace, key = str(change.get("namespace")), str(change.get("key"))
            if synced(namespace) and is_key(key):
                later = {
                    str(c.get("sha256"))
                    for _, c in pending[n + 1 :]
                    if c.get("namespace") == namespace and c.get("key") == key
                }
                try:
                    if change.get("op") == "put":
                        self._push_put(client, state, change, later)
                    elif change.get("op") == "delete":
                        self._push_delete(client, state, namespace, key)
                except Refused as exc:
                    if exc.status == 429 and change.get("op") == "put":
                        self._forgets_ahead(client, state, pending[n:])
                        self.files.save(state)  # what they did, kept past the raise below
                    if exc.status in RETRIED:
                        raise
                    self._set_aside(change, exc)
            state.offset = end
            if n % SAVE_EVERY == SAVE_EVERY - 1:
                self.files.save(state)
        self.files.save(state)
        if pending:
            self.files.compact(state)

    def _forgets_ahead(
        self, client: PortalClient, state: SyncState, rest: list[tuple[int, dict[str, Any]]]
    ) -> None:
        """A write refused for now (429: the store is full, or busy) waits, in order; the
        forgets behind it of other notes are pushed now, since they are what makes room (the
        quota's answer tells the agent to forget notes; waiting behind the write, a forget
        could never reach the portal, and the agent was wedged). Each is sent again in its
        turn, then only where the note is still absent (base ""): a note written anew
        elsewhere meanwhile is never forgotten by the resend; one whose forget lost to the
        portal's edit is not sent again (SETTLED_AHEAD)."""
        earlier = set()  # notes with a line before: their forget must wait for that line
        for _, change in rest:
            namespace, key = str(change.get("namespace")), str(change.get("key"))
            if change.get("op") == "delete" and (namespace, key) not in earlier:
                if synced(namespace) and is_key(key):
                    try:
                        gone = self._push_delete(client, state, namespace, key)
                    except Refused:
                        return  # refused too (the portal is busy): all wait, in order
                    state.bases[entry_id(namespace, key)] = "" if gone else SETTLED_AHEAD
            earlier.add((namespace, key))

    def _set_aside(self, change: dict[str, Any], exc: Refused) -> None:
        """A line the portal refuses for good would block every line behind it (and the
        pull) at every round: it is kept aside instead, said once, and shown in /memory."""
        self.files.set_aside(change, str(exc), now())
        log.error(
            "memory: the portal refused the %s of %s/%s for good (%s %s): it is set aside in "
            "%s and the changes after it go on; the note here is left as it is",
            "forget" if change.get("op") == "delete" else "write",
            change.get("namespace"),
            change.get("key"),
            exc.status,
            exc,
            self.files.folder / REFUSED,
        )

    def _push_put(
        self, client: PortalClient, state: SyncState, change: dict[str, Any], later: set[str]
    ) -> None:
        namespace, key, sha = change["namespace"], change["key"], change["sha256"]
        ident = entry_id(namespace, key)
        entry = {k: change[k] for k in ("namespace", "key", "content", "description", "at")}
        entry["source"] = SOURCE
        base = state.bases.get(ident)
        if base == sha:
            return  # the portal has this very content already (idempotent by its hash)
        try:
            # Never seen in the portal from here: "" (it must not exist), so that a note made
            # on both sides while apart is a conflict, not a silent overwrite.
            client.memory_put(entry, content_sha256=base if base is not None else "")
        except StaleEntry:
            current = client.memory_get(namespace, key)
            found = portal_hash(current.content) if current else None
            if found is not None and (found == sha or found in later):
                # This line (or a later one of the same key) is in the portal already: a
                # resend after a crash, applied once.
                state.bases[ident] = found
                return
            self._conflict(client, state, entry, sha, current, waiting=bool(later))
            return
        state.bases[ident] = sha

    def _conflict(
        self,
        client: PortalClient,
        state: SyncState,
        entry: dict[str, Any],
        sha: str,
        current: EntryOut | None,
        *,
        waiting: bool = False,
    ) -> None:
        """Both sides changed the entry since the last sync: the later stays current and the
        other becomes a version in the portal (pushed first). None: forgotten in the portal
        meanwhile, and an edit beats a forget. `waiting`: a later outbox line of the same
        entry is still to be pushed; the portal's is never written here then (that would put
        an edit older than the newest here back in the file and then in the portal): this
        line becomes a version, and the last line settles the entry against the portal's."""
        namespace, key = entry["namespace"], entry["key"]
        ident = entry_id(namespace, key)
        if current is None:
            client.memory_put(entry)
            state.bases[ident] = sha
            log.warning(
                "memory: %s/%s was forgotten in the portal and changed here since the "
                "last sync: the change here is kept",
                namespace,
                key,
            )
            self._record(state, namespace, key, "this machine", "forgotten in the portal")
            return
        theirs = portal_hash(current.content)
        ours_later = when(entry["at"]) >= when(current.updated_at)
        client.memory_put(entry, content_sha256=theirs)  # theirs is kept as a version
        if ours_later:
            state.bases[ident] = sha
            kept, other = "this machine", "the portal's"
        else:
            again = {
                "namespace": namespace,
                "key": key,
                "content": current.content,
                "description": current.description,
                "source": current.source or SOURCE,
                "at": wire_time(current.updated_at),
            }
            client.memory_put(again, content_sha256=sha)  # ours is kept as a version
            kept, other = "the portal", "this machine's"
            if waiting:
                # The base stays as it was: the later line's push is then compared with
                # the portal's (by when each was written) as a conflict of its own.
                log.info(
                    "memory: %s/%s changed in the portal since the last sync; an earlier "
                    "edit here is kept as a version and a later one settles it",
                    namespace,
                    key,
                )
                return
            state.bases[ident] = theirs
            self.puller.apply_put(state, current, theirs, force=True)
        log.warning(
            "memory: conflict on %s/%s (changed here and in the portal since the last sync): "
            "kept %s version as current (the later one) and %s as a version in the portal",
            namespace,
            key,
            "this machine's" if ours_later else "the portal's",
            other,
        )
        self._record(state, namespace, key, kept, f"{other} kept as a version in the portal")

    def _record(self, state: SyncState, namespace: str, key: str, kept: str, other: str) -> None:
        state.conflicts.append(
            {"namespace": namespace, "key": key, "kept": kept, "other": other, "at": now()}
        )

    def _push_delete(
        self, client: PortalClient, state: SyncState, namespace: str, key: str
    ) -> bool:
        """Whether the note is forgotten in the portal now (False: the portal's edit beat
        the forget)."""
        ident = entry_id(namespace, key)
        if state.bases.get(ident) == SETTLED_AHEAD:
            state.bases.pop(ident)  # pushed ahead, and the portal's edit kept: said then
            return False
        try:
            client.memory_delete(namespace, key, content_sha256=state.bases.get(ident))
        except StaleEntry:
            if client.memory_get(namespace, key) is None:  # forgotten already (a resend)
                state.bases.pop(ident, None)
                return True
            # Changed in the portal since this machine saw it: that edit beats the forget,
            # and the pull brings it back.
            log.warning(
                "memory: %s/%s was forgotten here but changed in the portal since the "
                "last sync: the portal's version is kept",
                namespace,
                key,
            )
            self._record(state, namespace, key, "the portal", "the forget here was not applied")
            state.bases.pop(ident, None)
            return False
        state.bases.pop(ident, None)
        return True
