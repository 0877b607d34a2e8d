"""`memory: {portal: true}` (M12, P7): the notes kept in the portal's memory store too, synced
with this machine entry by entry, in both directions.

- Push: every durable local write and forget is appended to the outbox (`sync_files`) before
  it is acknowledged, and a background thread pushes the outbox in order as soon as the portal
  answers. Offline, changes simply wait there.
- Exactly once in effect: each push carries the `content_sha256` the portal had when this
  machine last saw the entry. An entry is idempotent by (namespace, key, content hash): a
  resend after a crash (pushed, but not yet marked pushed) is refused as stale (409), and the
  portal's entry then holds the very content (or a later line's of the same key) being sent,
  so it is counted as done and no second version is made.
- Pull: each namespace's changes after its cursor, written through the same store code as the
  tools' writes (rights, atomic writes, the index), never over a file that cannot be read
  (reported instead) and never over a local change not yet pushed (the push resolves it).
  A page's notes are made durable together (`NoteStore.write_many`) and only then is the
  page's cursor saved: a crash mid-pull pulls the page again, which changes nothing written.
- Conflicts (both sides changed an entry since the last sync: the precondition was stale and
  the portal holds neither this nor the base content): the later one (by its `at`) stays
  current, and the other is pushed first so the portal keeps it as a version. The log and
  /memory say so. An edit beats a forget.
- Which namespaces are carried is rights.py's (`synced`); a conversation's search and its
  /memory see only what its `Rights` may read.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ...errors import ToolError, WebAgentsError
from ...portal_client import PortalClient, PortalUnreachable, Refused, StaleEntry
from .index import MemoryIndex
from .layout import EPISODE_PREFIX, is_key
from .note_file import Note, NoteFormatError
from .notes import NoteChanged, NoteStore, Write
from .rights import synced
from .sync_files import REFUSED, PortalLink, SyncFiles, SyncState, entry_id, portal_hash

log = logging.getLogger("webagents.memory")

SOURCE = "webagents"
ALL = "*"
"""The cursor of the pull of every namespace at once."""
SAVE_EVERY = 50
"""Pushed lines between saves of the state within a round (a crash in between resends
them, which the content hashes make harmless). A pull saves it once a page."""
PAGE = 1000
"""Changes asked for a pull page (the most the portal gives): each page's notes are written
together and made durable with two flushes (`NoteStore.write_many`)."""
RETRIED = frozenset({408, 409, 429})
"""The portal's refusals that a later round may see otherwise (too many requests, an entry
changed meanwhile): the line waits, in order. Any other 4xx is for good: the line is set
aside."""


def _when(value: object) -> datetime:
    try:
        found = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return datetime.min.replace(tzinfo=UTC)
    return found if found.tzinfo else found.replace(tzinfo=UTC)


def _as_local(value: object) -> str:
    """The portal's time (`...Z`) as the notes here write theirs (`...+00:00`)."""
    return _when(value).isoformat() if value else _now()


def _now() -> str:
    return datetime.now(UTC).isoformat()


def _as_read(local: str | None) -> Callable[[Note | None], bool]:
    """The compare-and-swap of a pull's write: the note is still as `_local` read it (its
    content hash, or None: no note), checked under the note store's lock."""
    return lambda note: (portal_hash(note.content) if note is not None else None) == local


def _put_line(namespace: str, key: str, content: str, description: str, at: str) -> dict[str, Any]:
    """An outbox line of a write; `sha256` is what makes a resend recognisable."""
    return {
        "op": "put",
        "namespace": namespace,
        "key": key,
        "content": content,
        "description": description,
        "at": at,
        "sha256": portal_hash(content),
    }


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
        self._thread: threading.Thread | None = None
        self._unreachable = False
        self.last_error: str | None = None

    # -- what the skill calls -------------------------------------------------------------------

    def wrote(self, namespace: str, key: str, content: str, description: str, at: str) -> None:
        """A durable local write: into the outbox (durably) before the write is acknowledged."""
        if synced(namespace):
            self.files.append(_put_line(namespace, key, content, description, at))
            self._wake.set()

    def forgot(self, namespace: str, key: str) -> None:
        if synced(namespace):
            self.files.append({"op": "delete", "namespace": namespace, "key": key, "at": _now()})
            self._wake.set()

    def start(self) -> None:
        """Sync now and then every `interval` seconds (and soon after each write), in a
        background thread: the conversation never waits for the portal."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name="webagents-memory-sync", daemon=True
            )
            self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()  # before the round: a write during it brings the next at once
            self.sync_round()
            self._wake.wait(self.interval)

    def sync_round(self, namespaces: list[str] | None = None) -> bool:
        """Push the outbox, then pull `namespaces` (None: every namespace kept here and in
        the portal); whether the portal answered. Another process's round meanwhile: skipped."""
        try:
            with self.files.round() as mine:
                if not mine:
                    return True
                if not self.files.has_state():
                    self._seed()
                state = self.files.load()
                with self.connect() as client:
                    self._drain(client, state)
                    self._pull(client, state, namespaces)
                state.last_sync = _now()
                self.files.save(state)
        except PortalUnreachable as exc:
            if not self._unreachable:
                log.warning(
                    "memory: the portal does not answer; changes wait in the outbox (%s)", exc
                )
            self._unreachable = True
            self.last_error = "the portal does not answer"
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

    def _seed(self) -> None:
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
                line = _put_line(namespace, key, note.content, note.description, note.updated)
                if (namespace, key, line["sha256"]) not in waiting:
                    lines.append(line)
        self.files.append(*lines)
        self.files.save(SyncState())

    # -- push ---------------------------------------------------------------------------------

    def _drain(self, client: PortalClient, state: SyncState) -> None:
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
                    if exc.status in RETRIED:
                        raise
                    self._set_aside(change, exc)
            state.offset = end
            if n % SAVE_EVERY == SAVE_EVERY - 1:
                self.files.save(state)
        self.files.save(state)
        if pending:
            self.files.compact(state)

    def _set_aside(self, change: dict[str, Any], exc: Refused) -> None:
        """A line the portal refuses for good would block every line behind it (and the
        pull) at every round: it is kept aside instead, said once, and shown in /memory."""
        self.files.set_aside(change, str(exc), _now())
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
            found = portal_hash(str(current.get("content", ""))) if current else None
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
        current: dict[str, Any] | None,
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
        theirs = portal_hash(str(current.get("content", "")))
        ours_later = _when(entry["at"]) >= _when(current.get("updated_at"))
        client.memory_put(entry, content_sha256=theirs)  # theirs is kept as a version
        if ours_later:
            state.bases[ident] = sha
            kept, other = "this machine", "the portal's"
        else:
            again = {
                "namespace": namespace,
                "key": key,
                "content": current.get("content", ""),
                "description": current.get("description") or "",
                "source": current.get("source") or SOURCE,
                "at": current.get("updated_at"),
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
            self._apply_put(state, namespace, key, again, theirs, force=True)
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
            {"namespace": namespace, "key": key, "kept": kept, "other": other, "at": _now()}
        )

    def _push_delete(
        self, client: PortalClient, state: SyncState, namespace: str, key: str
    ) -> None:
        ident = entry_id(namespace, key)
        try:
            client.memory_delete(namespace, key, content_sha256=state.bases.get(ident))
        except StaleEntry:
            if client.memory_get(namespace, key) is None:  # forgotten already (a resend)
                state.bases.pop(ident, None)
                return
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
            return
        state.bases.pop(ident, None)

    # -- pull ---------------------------------------------------------------------------------

    def _pull(self, client: PortalClient, state: SyncState, namespaces: list[str] | None) -> None:
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
                page = client.memory_sync_pull(namespace, state.cursors.get(where), PAGE)
                lines = page.get("lines") or []
                batch: dict[str, tuple[Write, str]] = {}
                for line in lines:
                    if not isinstance(line, dict):
                        continue
                    found = str(line.get("namespace"))
                    if synced(found) and namespace in (None, found):
                        self._apply(state, line, waiting, batch)
                self._write(state, batch)
                cursor = page.get("cursor")
                if cursor is not None:
                    state.cursors[where] = str(cursor)
                if lines:  # once a page, after its notes are durable: a crash re-pulls it
                    self.files.save(state)
                if not page.get("more") or not lines:
                    break

    def _write(self, state: SyncState, batch: dict[str, tuple[Write, str]]) -> None:
        """A page's notes written together (`NoteStore.write_many`), then indexed."""
        if not batch:
            return
        writes = [write for write, _ in batch.values()]
        changes = self.store.write_many(writes)
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

    def _apply(
        self,
        state: SyncState,
        line: dict[str, Any],
        waiting: set[str],
        batch: dict[str, tuple[Write, str]],
    ) -> None:
        namespace, key = str(line["namespace"]), str(line.get("key"))
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
        if line.get("op") == "delete":
            self._apply_delete(state, namespace, key)
        else:
            content = str(line.get("content") or "")
            self._apply_put(state, namespace, key, line, portal_hash(content), batch=batch)

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

    def _apply_put(
        self,
        state: SyncState,
        namespace: str,
        key: str,
        line: dict[str, Any],
        sha: str,
        *,
        force: bool = False,
        batch: dict[str, tuple[Write, str]] | None = None,
    ) -> None:
        """Write the portal's note here (into `batch`, written at the page's end, if given)."""
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
            str(line.get("content") or ""),
            str(line.get("description") or ""),
            kind,
            _as_local(line.get("at") or line.get("updated_at")),
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
                _put_line(namespace, key, note.content, note.description, note.updated)
            )
            self._wake.set()

    # -- what conversations see -------------------------------------------------------------

    def search(self, query: str, namespaces: list[str], limit: int = 10) -> dict[str, Any]:
        """The portal's (semantic and full-text) results over `namespaces` only, which the
        caller's rights chose; raises PortalUnreachable and the client's errors."""
        with self.connect() as client:
            answer = client.memory_search(query, namespaces, limit=limit)
        allowed = set(namespaces)
        answer["entries"] = [
            e
            for e in answer.get("entries") or []
            if isinstance(e, dict)
            and e.get("namespace") in allowed  # never anything else, whatever the portal says
        ]
        return answer

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
