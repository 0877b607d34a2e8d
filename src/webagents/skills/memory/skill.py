"""The `memory` skill: notes that last between conversations, kept apart for every caller.

Every read and write asks `rights` what the verified caller may do; the model's arguments
choose only among what is allowed (M3). This module owns what the tools do, the `## Memory`
block, episodes (M10) and /memory (M11); the settings are `settings`'s, and the tools as
each kind of caller sees them (only the owner's carry `namespace`) are `tools`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import itertools
import logging
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

from ..._files import LinkRefused
from ...agent_spec import CompactionSpec
from ...caller import OWNER_NAMESPACE, SHARED_NAMESPACE, shown_to_owner
from ...compaction import Compaction, Summary
from ...context import AgentInfo, Context, is_conversation_id
from ...errors import ConfigError, ToolError
from ...notes.index import MemoryIndex
from ...notes.layout import EPISODE_PREFIX, check_key
from ...notes.note_file import Note, NoteFormatError, first_line_summary
from ...notes.store import Limits, NoteStore
from ...portal_link.memory_sync.files import local_time, notes_root, portal_link
from ...portal_link.memory_sync.search import portal_results
from ...portal_link.memory_sync.sync import UNREACHABLE, PortalSync
from ...portal_wire.memory import EntryOut
from ...rights import Rights, rights_of
from ..base import ChatIO, Skill, SlashCommand, Tool
from .prompt import memory_block
from .settings import MemorySettings
from .tools import toolset

log = logging.getLogger("webagents.memory")

MAX_NOTE_CHARS = 64_000
MAX_DESCRIPTION_CHARS = 300
MAX_SNAPSHOTS = 200
"""Block snapshots kept per caller: the oldest go when a caller starts more conversations."""
MAX_LISTED = 500
INDEX_CACHE = ".index.sqlite"
FIRST_PULL_SECONDS = 5.0
"""How long the first block of a process waits for the portal's notes (`portal: true`)."""


def _is_namespace(value: str) -> bool:
    return value in (OWNER_NAMESPACE, SHARED_NAMESPACE) or (
        value.startswith("caller:") and len(value) > len("caller:")
    )


class MemorySkill(Skill[MemorySettings]):
    """Caller-scoped notes in `<agent folder>/.webagents/memory/`."""

    name = "memory"
    Settings = MemorySettings

    def __init__(self, settings: MemorySettings | None = None, /, **values: Any) -> None:
        super().__init__(settings, **values)
        self._store: NoteStore | None = None
        self._index: MemoryIndex | None = None
        self._sync: PortalSync | None = None
        self._toolsets = {kind: toolset(self, kind) for kind in ("owner", "writer", "reader")}

    # -- set up -------------------------------------------------------------------------------

    def bind(self, agent: AgentInfo) -> None:
        if agent.directory is None:
            raise ConfigError(
                "the memory skill keeps notes in the agent's folder: give the agent one "
                "(Agent(directory=...), or load it from its folder)"
            )
        settings = self.settings
        self.close()  # bound again: one sync thread, the new one
        dot_webagents = agent.directory / ".webagents"
        link = portal_link(agent.directory, agent.profile) if settings.portal else None
        self._store = NoteStore(
            notes_root(dot_webagents, agent.profile, link is not None and not settings.local),
            caller_limits=Limits(settings.caller_notes, settings.caller_note_bytes),
            owner_limits=Limits(settings.owner_notes, settings.owner_note_bytes),
            channel_senders=settings.channel_senders,
            jwt_callers=settings.jwt_callers,
        )
        self._index = MemoryIndex(self._store, cache=self._store.root / INDEX_CACHE)
        self._index.rebuild()
        if link is not None:
            self._sync = PortalSync(
                self._store, self._index, link, dot_webagents, interval=settings.sync_seconds
            )
            self._sync.start()

    def close(self) -> None:
        """Stop the portal sync's thread (what waits in its outbox stays for the next start)."""
        if self._sync is not None:
            self._sync.close()
            self._sync = None

    async def portal_notice(self) -> str | None:
        """What a chat says at its start when the portal's notes could not be brought here
        for its first conversation (`portal: true`), else None."""
        sync = self._sync
        if sync is None or await asyncio.to_thread(sync.first_round, FIRST_PULL_SECONDS):
            return None
        return (
            f"memory: {_failed(sync)}, so this conversation shows only the notes kept on this "
            "machine; /memory syncs again"
        )

    async def finish(self, within: float) -> str | None:
        """The end of a one-shot run: this process's writes pushed to the portal (`within`
        seconds at most) and the sync stopped; what to tell the user when some still wait in
        the outbox, else None."""
        sync = self._sync
        if sync is None:
            return None
        waiting = await asyncio.to_thread(sync.flush, within)
        await asyncio.to_thread(self.close)
        if not waiting:
            return None
        changes = "1 change waits" if waiting == 1 else f"{waiting} changes wait"
        return (
            f"memory: {_failed(sync)}: {changes} in this machine's outbox, pushed by the "
            "agent's next chat, run or serve"
        )

    @property
    def sync(self) -> PortalSync | None:
        """The portal sync (`portal: true`), else None."""
        return self._sync

    def default_compaction(self) -> Compaction | None:
        """The legacy `compaction: <tokens>` (or `{threshold, keep}`) setting, when the agent
        file has no compaction: block (C1)."""
        setting = self.settings.compaction
        if setting is None:
            return None
        if isinstance(setting, CompactionSpec):
            return Compaction.from_spec(setting)
        return Compaction(threshold=setting)

    @property
    def store(self) -> NoteStore:
        if self._store is None:
            raise ConfigError("the memory skill is not part of an agent yet")
        return self._store

    @property
    def index(self) -> MemoryIndex:
        if self._index is None:
            raise ConfigError("the memory skill is not part of an agent yet")
        return self._index

    # -- per conversation ---------------------------------------------------------------------

    def tools(self, ctx: Context) -> Sequence[Tool]:
        rights = rights_of(ctx.caller)
        kind = "owner" if ctx.caller.is_owner else "writer" if rights.can_write_any else "reader"
        return self._toolsets[kind]

    async def prompt(self, ctx: Context) -> str | None:
        rights = rights_of(ctx.caller)
        snapshot = self._snapshot_name(rights, ctx)
        if snapshot is not None:
            try:
                kept = self.store.read_snapshot(*snapshot)
            except LinkRefused as exc:
                log.error("memory: a conversation's memory block cannot be read: %s", exc)
                kept = None
            if kept is not None:
                return kept  # the block of this conversation (M6)
        if self._sync is not None:  # a fresh machine's first block has the portal's notes
            await asyncio.to_thread(self._sync.first_round, FIRST_PULL_SECONDS)
        block = self.block(rights)
        if snapshot is not None and block is not None:
            try:
                self.store.keep_snapshot(*snapshot, block, keep=MAX_SNAPSHOTS)
            except (LinkRefused, ToolError) as exc:  # the block still serves this turn
                log.error("memory: a conversation's memory block was not kept: %s", exc)
        return block

    def block(self, rights: Rights) -> str | None:
        """The `## Memory` block for a caller with these rights, as of now."""
        namespaces = rights.lookup_order()
        self.index.refresh(namespaces)
        own = self.index.entries(rights.own) if rights.own is not None else []
        shared = self.index.entries(SHARED_NAMESPACE) if rights.own != SHARED_NAMESPACE else []
        return memory_block(
            rights.own,
            own,
            shared,
            budget=self.settings.notes_budget,
            can_write=rights.can_write_any,
        )

    def _snapshot_name(self, rights: Rights, ctx: Context) -> tuple[str, str] | None:
        """Where this conversation's block is kept: (namespace, file name)."""
        conversation = ctx.conversation_id
        if ctx.kept:
            return None  # the session keeps the whole prompt of this conversation
        if rights.own is None or conversation is None or not is_conversation_id(conversation):
            return None
        return rights.own, f"{conversation}.block"

    # -- what the tools do --------------------------------------------------------------------

    def _readable(self, rights: Rights, namespace: str | None) -> list[str]:
        if namespace is not None:
            if not _is_namespace(namespace) or not rights.can_read(namespace):
                raise ToolError(f"you cannot read the namespace {namespace!r}")
            return [namespace]
        if rights.reads_all:
            return rights.readable(self.store.namespaces())
        return rights.lookup_order()

    def _writable(self, rights: Rights, namespace: str | None) -> str:
        target = namespace or rights.own
        if target is None or not rights.can_write(target):
            if target is None:
                raise ToolError("you cannot keep notes: the agent has not verified who you are")
            raise ToolError(f"you cannot write to the namespace {target!r}")
        return target

    async def search(self, ctx: Context, query: str, namespace: str | None = None) -> Any:
        rights = rights_of(ctx.caller)
        namespaces = self._readable(rights, namespace)
        self.index.refresh(namespaces)
        hits = self.index.search(query, namespaces)
        found: list[dict[str, Any]] = [
            {
                "key": hit.entry.key,
                "namespace": hit.entry.namespace,
                **({"kind": hit.entry.kind} if hit.entry.kind != "note" else {}),
                "description": hit.entry.summary,
                "updated": hit.entry.updated,
                "snippet": hit.snippet,
            }
            for hit in hits
        ]
        if self._sync is not None:  # the portal's results, over the same namespaces only
            found.extend(await portal_results(self._sync, query, namespaces, found))
        return found

    async def read(self, ctx: Context, key: str, namespace: str | None = None) -> Any:
        rights = rights_of(ctx.caller)
        check_key(key, episode=True)
        candidates = self._readable(rights, namespace) if namespace else rights.lookup_order()
        for candidate in candidates:
            try:
                note = self.store.read(candidate, key)
            except NoteFormatError as exc:
                raise ToolError(f"the note {key!r} cannot be read: {exc}") from None
            if note is not None:
                return _full(note)
        if self._sync is not None:  # another process of the agent may have just written it
            found = await asyncio.to_thread(self._sync.read_through, candidates, key)
            if found is not None:
                return _full(_note_of(found))
        raise ToolError(f"there is no note {key!r}; memory_list shows the keys")

    async def write(
        self,
        ctx: Context,
        key: str,
        content: str,
        description: str = "",
        namespace: str | None = None,
        *,
        kind: str = "note",
        create: bool = False,
    ) -> Any:
        rights = rights_of(ctx.caller)
        target = self._writable(rights, namespace)
        check_key(key, episode=kind == "episode")
        if len(content) > MAX_NOTE_CHARS:
            raise ToolError(f"a note holds at most {MAX_NOTE_CHARS} characters; split it")
        if len(description) > MAX_DESCRIPTION_CHARS:
            raise ToolError(
                f"a description is one line of at most {MAX_DESCRIPTION_CHARS} "
                "characters; put the rest in the content"
            )
        # In the event loop, not a thread: a note write (fsync included) takes about a
        # millisecond and a thread hand-off costs nearly as much again (bench/memory.py).
        with _stored(key):
            change = self.store.write(target, key, content, description, kind=kind, create=create)
        self.index.record(target, key, change)
        assert change.note is not None
        if self._sync is not None:  # durably in the outbox before the write is acknowledged
            note = change.note
            self._sync.wrote(target, key, note.content, note.description, note.updated)
        return {"saved": key, "namespace": target, "updated": change.note.updated}

    async def forget(self, ctx: Context, key: str, namespace: str | None = None) -> Any:
        rights = rights_of(ctx.caller)
        target = self._writable(rights, namespace)
        check_key(key, episode=True)
        with _stored(key):
            change = self.store.forget(target, key)
        if change is None:
            raise ToolError(f"there is no note {key!r} in {target}; memory_list shows the keys")
        self.index.record(target, key, change)
        if self._sync is not None:
            self._sync.forgot(target, key)
        return {"forgot": key, "namespace": target}

    async def list(self, ctx: Context, namespace: str | None = None) -> Any:
        rights = rights_of(ctx.caller)
        namespaces = self._readable(rights, namespace)
        self.index.refresh(namespaces)
        entries = [entry for ns in namespaces for entry in self.index.entries(ns)]
        listed: dict[str, Any] = {
            "notes": [
                {
                    "key": e.key,
                    "namespace": e.namespace,
                    "description": e.summary,
                    "updated": e.updated,
                }
                for e in entries[:MAX_LISTED]
            ]
        }
        if len(entries) > MAX_LISTED:
            listed["more"] = len(entries) - MAX_LISTED
        return listed

    # -- episodes (M10) -----------------------------------------------------------------------

    async def on_compacted(self, ctx: Context, summary: Summary) -> None:
        """Keep the summary as an episode (M10), for a conversation that is kept: one
        without a session would be summarised afresh at every request, and kept as often."""
        if not ctx.kept:
            return
        try:
            key = await self.keep_episode(ctx, summary.text)
        except (ToolError, OSError) as exc:  # the summary still serves the conversation
            log.warning("memory: the summary was not kept as an episode (%s)", exc)
            return
        if key is not None:
            log.info("memory: kept the summary as %s", key)

    async def keep_episode(self, ctx: Context, summary: str) -> str | None:
        """Keep a conversation summary as `episode-<time>-<n>` in the caller's namespace.

        Found by memory_search and memory_read, never listed in the block. None for a caller
        with no namespace of its own (nothing is kept for them).
        """
        rights = rights_of(ctx.caller)
        if rights.own is None:
            return None
        stamp = datetime.now(UTC).strftime("%Y%m%dt%H%M%S")
        description = ("Summary of an earlier conversation: " + first_line_summary(summary))[:120]
        for n in itertools.count(1):
            key = f"{EPISODE_PREFIX}{stamp}-{n}"
            try:  # chosen under the namespace's lock: parallel summaries never share a key
                await self.write(ctx, key, summary, description, kind="episode", create=True)
            except FileExistsError:
                continue
            return key
        raise AssertionError("unreachable")

    # -- the chat (M11) -----------------------------------------------------------------------

    def commands(self) -> Sequence[SlashCommand]:
        return [SlashCommand("memory", "where notes are kept; /memory forget <key>", self._chat)]

    async def _chat(self, io: ChatIO, ctx: Context, args: str) -> None:
        words = args.split()
        if words[:1] == ["forget"]:
            if len(words) != 2:
                io.say("usage: /memory forget <key>")
                return
            key = words[1]
            rights = rights_of(ctx.caller)
            try:
                check_key(key, episode=True)
                note = self.store.read(self._writable(rights, None), key)
            except (ToolError, NoteFormatError) as exc:
                io.say(str(exc))
                return
            if note is None:
                io.say(f"you have no note {key!r}")
                return
            if await io.confirm(f"Forget {key!r} ({note.summary})?"):
                await self.forget(ctx, key)
                io.say(f"forgot {key}")
            else:
                io.say("kept it")
            return
        if words:
            io.say("usage: /memory, or /memory forget <key>")
            return
        rights = rights_of(ctx.caller)
        if self._sync is not None:  # what the portal has for this caller, before the counts
            wanted = None if rights.reads_all else rights.lookup_order()
            await asyncio.to_thread(self._sync.sync_round, wanted)
        io.say(self.report(rights))

    def report(self, rights: Rights) -> str:
        """What /memory shows: where, how many yours, shared and per caller, newest keys."""
        namespaces = rights.readable(self.store.namespaces())
        self.index.refresh(namespaces)
        counts = self.index.counts()
        callers = [ns for ns in namespaces if ns.startswith("caller:")]

        def count(ns: str, kind: str = "note") -> str:
            n = counts.get((ns, kind), 0)
            return f"{n} {kind}{'' if n == 1 else 's'}"

        lines = [f"Notes are kept in {self.store.root}"]
        if rights.own is not None:
            lines.append(
                f"yours ({shown_to_owner(rights.own)}): {count(rights.own)}, "
                f"{count(rights.own, 'episode')}"
            )
        lines.append(f"shared: {count(SHARED_NAMESPACE)}")
        if rights.reads_all:
            per_caller = sum(counts.get((ns, "note"), 0) for ns in callers)
            lines.append(
                f"callers: {len(callers)}, with {per_caller} note{'' if per_caller == 1 else 's'}"
            )
            for ns in callers[:10]:
                lines.append(f"  {shown_to_owner(ns)}: {count(ns)}, {count(ns, 'episode')}")
        if rights.own is not None:
            newest = [e.key for e in self.index.entries(rights.own)[:5]]
            lines.append("your newest: " + (", ".join(newest) if newest else "none yet"))
        problems = [p for ns in namespaces for p in self.index.problems.get(ns, [])]
        for problem in problems:
            lines.append(f"cannot read {problem} (left as it is)")
        if self._sync is not None:
            lines.extend(self._sync.report(namespaces))
        return "\n".join(lines)


@contextlib.contextmanager
def _stored(key: str) -> Iterator[None]:
    """A change of the files that cannot be made as a tool error the model can pass on,
    with the details (paths) for the owner's log only."""
    try:
        yield
    except LinkRefused as exc:
        log.error("memory: refused to write through a link: %s", exc.strerror)  # no [Errno]
        raise ToolError(
            f"the note {key!r} was not changed: where it is kept is a link on the agent's "
            "machine, which notes are never written through (the agent's owner is told)"
        ) from None
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        log.error("memory: the disk is full: %s", exc)
        raise ToolError(
            f"the note {key!r} was not changed: the agent's disk is full (the agent's owner "
            "is told); try again later"
        ) from None


def _failed(sync: PortalSync) -> str:
    """What went wrong with the portal, for a line to the user."""
    if sync.last_error in (None, UNREACHABLE):
        return f"the portal {sync.link.url} did not answer"
    return f"the sync with the portal {sync.link.url} failed ({sync.last_error})"


def _note_of(entry: EntryOut) -> Note:
    """The portal's entry as the note it becomes here once pulled."""
    kind = "episode" if entry.key.startswith(EPISODE_PREFIX) else "note"
    updated = local_time(entry.updated_at)
    return Note(entry.namespace, entry.key, entry.content, entry.description, updated, kind)


def _full(note: Note) -> dict[str, Any]:
    result: dict[str, Any] = {
        "key": note.key,
        "namespace": note.namespace,
        "description": note.summary,
        "updated": note.updated,
        "content": note.content,
    }
    if note.kind != "note":
        result["kind"] = note.kind
    return result
