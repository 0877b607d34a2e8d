"""Conversations kept on this machine (S7): one JSON file per conversation, per caller.

    ~/.webagents/sessions/<folder>/<agent>/<id>.json                  the owner's
    ~/.webagents/sessions/<folder>/<agent>/callers/<hash>/<id>.json   every other caller's

`<folder>` names the agent's folder (readable, plus a hash of its absolute path, so two
folders never share one), `<hash>` the caller's namespace. A conversation id only ever names
a conversation of the caller who sent it. Files are 0600 and folders 0700; writes are atomic
(whole files by rename, turns by appending one record to a journal beside the file), and a
file that is not a session file is reported and never overwritten.

This module owns where conversations are kept and how a save reaches the disk (the folders,
the lock, appending or writing whole); one conversation's files are `session_file`'s, and
how much each caller may keep is `limits`'s.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path

from .._files import count_marked, exclusive, open_file_at, open_lock, open_private_dir, write_at
from ..caller import OWNER_NAMESPACE
from ..context import is_conversation_id
from ..home import sessions_dir
from ..model import Message
from ..newcomers import Kind
from .limits import SessionLimits
from .protocol import SessionSummary
from .session_file import (
    SessionError,
    SessionFile,
    SessionLinkError,
    Version,
    check_extends,
    common_prefix,
    dumps,
    file_state,
    journal_path,
    journal_record,
    read_session,
    refuse_dropping,
    refused_links,
)

NAMESPACE_FILE = ".namespace"
"""In each caller's folder: the namespace it keeps, so that channel senders and JWT callers
can be counted."""
JOURNAL_MIN_FOLD = 16 * 1024
"""A journal is folded into its snapshot once it is larger than this and a quarter of the
snapshot: loading then replays a few dozen records at most, and folding costs little per turn."""


def agent_folder_name(directory: Path) -> str:
    """A readable, unique folder name for an agent's folder (the chat and serve agree)."""
    absolute = os.path.realpath(directory)
    digest = hashlib.sha256(absolute.encode("utf-8")).hexdigest()[:12]
    readable = re.sub(r"[^A-Za-z0-9]+", "-", absolute).strip("-")[-48:].strip("-")
    return f"{readable or 'root'}-{digest}"


def caller_hash(namespace: str) -> str:
    return hashlib.sha256(namespace.encode("utf-8")).hexdigest()[:32]


class LocalSessionStore:
    """Conversations in `~/.webagents/sessions/` (or the profile's), per caller.

    `<id>.json` is a `SessionFile`. A turn that adds to a conversation is appended to a journal
    beside it (`.<id>.journal`, one JSON record per line, one fsync), which is folded into
    `<id>.json` once it outgrows it: keeping a turn costs the turn, not the conversation. A
    record holds how many of the kept messages stay (`keep`) and the ones that follow
    (`add`), so a client that edits its history is kept as it sent it (S6).

    Below `~/.webagents/sessions/` nothing is read or written through a link (one caller's
    folder linked to another's would hand one the other's conversations): it is a
    `SessionLinkError`. The limits (`caller_sessions`, `caller_session_bytes`, their owner's
    counterparts, `channel_senders` and `jwt_callers`) are `SessionLimits`, asked before a
    caller's folder is made and, under the lock, before a conversation is kept.
    """

    def __init__(
        self,
        agent_directory: Path,
        agent: str,
        *,
        profile: str | None = None,
        caller_sessions: int | None = None,
        owner_sessions: int | None = None,
        caller_session_bytes: int | None = None,
        owner_session_bytes: int | None = None,
        channel_senders: int | None = None,
        jwt_callers: int | None = None,
    ) -> None:
        self.base = sessions_dir(profile)
        self._parts = (agent_folder_name(agent_directory), agent)
        self.root = self.base.joinpath(*self._parts)
        self.agent = agent
        self.problems: list[str] = []
        self.limits = SessionLimits(
            caller_sessions=caller_sessions,
            owner_sessions=owner_sessions,
            caller_session_bytes=caller_session_bytes,
            owner_session_bytes=owner_session_bytes,
            channel_senders=channel_senders,
            jwt_callers=jwt_callers,
        )

    def folder(self, namespace: str) -> Path:
        return self.root.joinpath(*self._folder_parts(namespace))

    def _folder_parts(self, namespace: str) -> tuple[str, ...]:
        if namespace == OWNER_NAMESPACE:
            return ()
        if not namespace.startswith("caller:"):
            raise SessionError(
                f"conversations are kept for verified callers only, not {namespace!r}"
            )
        return ("callers", caller_hash(namespace))

    def path(self, namespace: str, session_id: str) -> Path:
        if not is_conversation_id(session_id):
            raise SessionError(
                f"{session_id!r} is not a conversation id: use 1-128 characters of "
                "A-Z a-z 0-9 . _ - (and not '..')"
            )
        return self.folder(namespace) / f"{session_id}.json"

    def load(self, namespace: str, session_id: str) -> SessionFile | None:
        found = self.open(namespace, session_id)
        return found[0] if found else None

    def open(self, namespace: str, session_id: str) -> tuple[SessionFile, Version] | None:
        """The conversation and its version (None if none is kept); SessionError if damaged."""
        path = self.path(namespace, session_id)
        dir_fd = self._open_folder(namespace, create=False)
        if dir_fd is None:
            return None
        try:
            return read_session(path, dir_fd=dir_fd)
        finally:
            os.close(dir_fd)

    def check_extends(
        self, namespace: str, session_id: str, messages: Sequence[Message], since: Version | None
    ) -> None:
        """SessionConflict when a save of `messages` would be refused now (see
        `session_file.check_extends`)."""
        dir_fd = self._open_folder(namespace, create=False)
        if dir_fd is None:
            return  # nothing kept: a save adds it
        try:
            check_extends(self.path(namespace, session_id), dir_fd, messages, since)
        finally:
            os.close(dir_fd)

    def admit(self, namespace: str) -> None:
        """SessionLimitError when a new conversation of this caller would pass a limit."""
        dir_fd = self._open_folder(namespace, create=False)
        if dir_fd is None:
            self.limits.check_newcomer(namespace, self.namespaces_of)
            return
        try:
            self.limits.check_room(namespace, dir_fd, self.folder(namespace))
            self.limits.check_bytes(namespace, dir_fd, self.folder(namespace), None, 0)
        finally:
            os.close(dir_fd)

    def save(
        self,
        namespace: str,
        session: SessionFile,
        *,
        since: Version | None = None,
        replace: bool = False,
    ) -> Version:
        """Keep the session in place of what was kept under its id (never a damaged file).

        Its messages must begin with every kept one (read under the lock, so a turn another
        process kept meanwhile counts): otherwise a SessionConflict and nothing is written,
        unless `replace` (the caller gave the conversation whole, S6). Given the version it
        was loaded or last saved as, and the files unchanged since, only what changed is
        appended to the journal; otherwise `<id>.json` is written whole.
        """
        path = self.path(namespace, session["id"])
        session["updated"] = datetime.now(UTC).isoformat()
        with self._locked(namespace) as dir_fd:
            state = file_state(path.name, dir_fd)
            if since is not None and state == since.snapshot:
                appended = self._append(namespace, path, dir_fd, session, since, replace)
                if appended is not None:
                    return appended
            generation = 0
            if state is not None:
                # Changed since it was read, or never read here: it must be a session file
                # (not a hand edit, nor another program's) before it is replaced.
                current = read_session(path, dir_fd=dir_fd)
                if current is not None and not replace:
                    refuse_dropping(current[0]["messages"], session)
                generation = current[1].generation + 1 if current else 0
            else:
                # Under the lock: no two pass at once.
                self.limits.check_room(namespace, dir_fd, self.folder(namespace))
            session["generation"] = generation
            data = dumps(session)
            where = self.folder(namespace)
            self.limits.check_bytes(namespace, dir_fd, where, session["id"], len(data))
            info = refused_links(path, lambda: write_at(dir_fd, path.name, data, locked=True))
            with contextlib.suppress(FileNotFoundError):
                os.unlink(journal_path(path).name, dir_fd=dir_fd)
            snapshot = (info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
            prompt = session.get("system_prompt")
            return Version(snapshot, 0, generation, session["messages"], prompt)

    def _append(
        self,
        namespace: str,
        path: Path,
        dir_fd: int,
        session: SessionFile,
        since: Version,
        replace: bool,
    ) -> Version | None:
        """Append the change to the journal, or None when the file should be written whole."""
        journal = journal_path(path)
        try:
            size = os.stat(journal.name, dir_fd=dir_fd, follow_symlinks=False).st_size
        except FileNotFoundError:
            size = 0
        if size != since.journal or size > max(since.snapshot[1] // 4, JOURNAL_MIN_FOLD):
            return None  # changed meanwhile, a torn record to drop, or time to fold it in
        if session.get("system_prompt") != since.system_prompt:
            return None  # records do not carry the prompt: the file takes it
        messages = session["messages"]
        if not replace:
            refuse_dropping(since.messages, session)  # the files are as `since` read them
        keep = common_prefix(since.messages, messages)
        line = journal_record(session, since.generation, keep)
        after = since.snapshot[1] + size + len(line)
        if self.limits.over_bytes(namespace, dir_fd, session["id"], after):
            return None  # written whole, it may take less (a shorter conversation): see there
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
        fd = refused_links(
            journal,
            lambda: open_file_at(dir_fd, journal.name, flags, where=journal, single=True),
        )
        try:
            written = 0
            while written < len(line):
                written += os.write(fd, line[written:])
            os.fdatasync(fd)
        finally:
            os.close(fd)
        return Version(
            since.snapshot, size + len(line), since.generation, messages, since.system_prompt
        )

    def recent(self, namespace: str, limit: int = 20) -> list[SessionSummary]:
        """The newest conversations first; unreadable files are noted in `problems`."""
        found: list[SessionSummary] = []
        self.problems = []
        try:
            dir_fd = self._open_folder(namespace, create=False)
        except SessionLinkError as exc:
            self.problems.append(str(exc))
            return found
        if dir_fd is None:
            return found
        try:
            names = [name for name in os.listdir(dir_fd) if name.endswith(".json")]
            for name in names:
                try:
                    found_one = read_session(self.folder(namespace) / name, dir_fd=dir_fd)
                except SessionError as exc:
                    self.problems.append(str(exc))
                    continue
                if found_one is None:  # removed meanwhile
                    continue
                session = found_one[0]
                turns = sum(1 for m in session["messages"] if m.get("role") == "user")
                found.append(
                    SessionSummary(session["id"], session["title"], session["updated"], turns)
                )
        finally:
            os.close(dir_fd)
        found.sort(key=lambda s: s.updated, reverse=True)
        return found[:limit]

    def remove(self, namespace: str, session_id: str) -> bool:
        """Remove a kept conversation and its journal; False when there was none."""
        path = self.path(namespace, session_id)
        found = self._open_folder(namespace, create=False)
        if found is None:
            return False  # no folder: nothing kept, and none is made to find that out
        os.close(found)
        with self._locked(namespace) as dir_fd:
            try:
                os.unlink(path.name, dir_fd=dir_fd)
            except FileNotFoundError:
                return False
            with contextlib.suppress(FileNotFoundError):
                os.unlink(journal_path(path).name, dir_fd=dir_fd)
        return True

    def namespaces_of(self, kind: Kind) -> int:
        """How many callers of a kind (channel senders, JWT callers) have a folder here."""
        return count_marked(self.root / "callers", NAMESPACE_FILE, kind.prefix)

    def read_folder(self, caller_folder: str | None) -> tuple[list[SessionFile], list[str]]:
        """Every conversation kept in the owner's folder (None) or in one caller's folder (by
        its name under `callers/`), read as every other path reads them: no link followed;
        with what could not be read."""
        where = self.root if caller_folder is None else self.root / "callers" / caller_folder
        parts = self._parts if caller_folder is None else (*self._parts, "callers", caller_folder)
        try:
            dir_fd = refused_links(where, lambda: open_private_dir(self.base, parts, create=False))
        except SessionError as exc:
            return [], [str(exc)]
        if dir_fd is None:
            return [], []
        found: list[SessionFile] = []
        problems: list[str] = []
        try:
            for name in sorted(os.listdir(dir_fd)):
                if name.startswith(".") or not name.endswith(".json"):
                    continue
                try:
                    read = read_session(where / name, dir_fd=dir_fd)
                except SessionError as exc:
                    problems.append(str(exc))
                    continue
                if read is not None:
                    found.append(read[0])
        finally:
            os.close(dir_fd)
        return found, problems

    def caller_namespaces(self) -> dict[str, str]:
        """Caller folder name -> the namespace its marker names, for every caller's folder
        with a marker that hashes to its folder's name (a marker naming another folder's
        caller is not believed; folders kept before markers were written have none)."""
        callers = self.root / "callers"
        try:
            names = os.listdir(callers)
        except (FileNotFoundError, NotADirectoryError):
            return {}
        found: dict[str, str] = {}
        for name in names:
            with contextlib.suppress(OSError, UnicodeDecodeError):
                flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK
                fd = os.open(callers / name / NAMESPACE_FILE, flags)
                try:
                    namespace = os.read(fd, 4096).decode("utf-8")
                finally:
                    os.close(fd)
                if caller_hash(namespace) == name:
                    found[name] = namespace
        return found

    # -- folders --------------------------------------------------------------------------------

    def _open_folder(self, namespace: str, *, create: bool) -> int | None:
        """A descriptor of the namespace's folder (None when missing and not `create`), never
        reached through a link below the sessions folder; a caller's folder made here gets
        its marker."""
        parts = (*self._parts, *self._folder_parts(namespace))
        where = self.folder(namespace)
        if create and namespace != OWNER_NAMESPACE and not os.path.lexists(where):
            self.limits.check_newcomer(namespace, self.namespaces_of)
        dir_fd = refused_links(where, lambda: open_private_dir(self.base, parts, create=create))
        if dir_fd is None or not create or namespace == OWNER_NAMESPACE:
            return dir_fd
        try:
            if file_state(NAMESPACE_FILE, dir_fd) is None:
                write_at(dir_fd, NAMESPACE_FILE, namespace.encode("utf-8"))
        except BaseException:
            os.close(dir_fd)
            raise
        return dir_fd

    @contextlib.contextmanager
    def _locked(self, namespace: str) -> Iterator[int]:
        dir_fd = self._open_folder(namespace, create=True)
        assert dir_fd is not None
        try:
            lock = self.folder(namespace) / ".lock"
            with exclusive(refused_links(lock, lambda: open_lock(dir_fd, lock))):
                yield dir_fd
        finally:
            os.close(dir_fd)
