"""Conversations kept on this machine (S7): one JSON file per conversation, per caller.

    ~/.webagents/sessions/<folder>/<agent>/<id>.json                  the owner's
    ~/.webagents/sessions/<folder>/<agent>/callers/<hash>/<id>.json   every other caller's

`<folder>` names the agent's folder (readable, plus a hash of its absolute path, so two
folders never share one), `<hash>` the caller's namespace. A conversation id only ever names
a conversation of the caller who sent it. Files are 0600 and folders 0700; writes are atomic
(whole files by rename, turns by appending one record to a journal beside the file), and a
file that is not a session file is reported and never overwritten.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import logging
import os
import re
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NotRequired, Protocol, TypedDict, TypeVar, cast

import orjson

from ..._files import LinkRefused, count_marked, open_file_at, open_private_dir, write_at
from ...caller import OWNER_NAMESPACE
from ...context import is_conversation_id
from ...errors import WebAgentsError
from ...home import sessions_dir
from ...model import Message
from ..newcomers import Kind, Newcomers

log = logging.getLogger("webagents.session")

FORMAT = 1
NAMESPACE_FILE = ".namespace"
"""In each caller's folder: the namespace it keeps, so that channel senders and JWT callers
can be counted."""
TITLE_LIMIT = 80
JOURNAL_MIN_FOLD = 16 * 1024
"""A journal is folded into its snapshot once it is larger than this and a quarter of the
snapshot: loading then replays a few dozen records at most, and folding costs little per turn."""


class SessionFile(TypedDict):
    """The documented shape of `<id>.json`."""

    format: int
    id: str
    agent: str
    created: str
    updated: str
    title: str
    messages: list[Message]
    """The conversation after the system prompt, as OpenAI message dicts (tool calls too)."""
    usage: dict[str, int]
    system_prompt: NotRequired[str]
    """The conversation's system prompt as built at its start, so later turns reuse it."""
    compaction: NotRequired[dict[str, Any]]
    """The conversation's summary (C2): `text`, how many leading messages it `covers`, and a
    `digest` of them, so later turns send it in their place instead of summarising again."""
    generation: NotRequired[int]
    """How many times the file was written whole; journal records name the one they follow."""


class SessionError(WebAgentsError):
    """A session cannot be kept or read; the message says which file and why."""


class SessionLinkError(SessionError):
    """A folder or file of kept conversations is a link: nothing is read or written through
    it. The message names the path, for the owner."""


class SessionLimitError(SessionError):
    """A new conversation would pass a limit of how many are kept; the message, meant for the
    caller, says which and what to do."""


@dataclass(frozen=True, slots=True)
class SessionSummary:
    id: str
    title: str
    updated: str
    turns: int


@dataclass(frozen=True, slots=True)
class Version:
    """A kept conversation as this store read or wrote it: what a later save builds on."""

    snapshot: tuple[int, int, int, int]
    """(inode, size, mtime, ctime) of `<id>.json`."""
    journal: int
    """Bytes of the journal, all of them whole records."""
    generation: int
    messages: list[Message]
    system_prompt: str | None


class SessionStore(Protocol):
    """Where conversations are kept; a second backend (the portal) implements the same."""

    def load(self, namespace: str, session_id: str) -> SessionFile | None: ...

    def open(self, namespace: str, session_id: str) -> tuple[SessionFile, Version] | None: ...

    def save(
        self, namespace: str, session: SessionFile, *, since: Version | None = None
    ) -> Version: ...

    def recent(self, namespace: str, limit: int = 20) -> list[SessionSummary]: ...


def agent_folder_name(directory: Path) -> str:
    """A readable, unique folder name for an agent's folder (the chat and serve agree)."""
    absolute = os.path.realpath(directory)
    digest = hashlib.sha256(absolute.encode("utf-8")).hexdigest()[:12]
    readable = re.sub(r"[^A-Za-z0-9]+", "-", absolute).strip("-")[-48:].strip("-")
    return f"{readable or 'root'}-{digest}"


def caller_hash(namespace: str) -> str:
    return hashlib.sha256(namespace.encode("utf-8")).hexdigest()[:32]


def title_of(messages: list[Message]) -> str:
    for message in messages:
        if message.get("role") == "user" and isinstance(message.get("content"), str):
            text = " ".join(message["content"].split())
            return text if len(text) <= TITLE_LIMIT else text[: TITLE_LIMIT - 1] + "…"
    return "(no message yet)"


def new_session(
    session_id: str, agent: str, messages: list[Message], *, system_prompt: str | None = None
) -> SessionFile:
    now = datetime.now(UTC).isoformat()
    session = SessionFile(
        format=FORMAT,
        id=session_id,
        agent=agent,
        created=now,
        updated=now,
        title=title_of(messages),
        messages=messages,
        usage={"prompt_tokens": 0, "completion_tokens": 0},
    )
    if system_prompt is not None:
        session["system_prompt"] = system_prompt
    return session


class LocalSessionStore:
    """Conversations in `~/.webagents/sessions/` (or the profile's), per caller.

    `<id>.json` is a `SessionFile`. A turn that adds to a conversation is appended to a journal
    beside it (`.<id>.journal`, one JSON record per line, one fsync), which is folded into
    `<id>.json` once it outgrows it: keeping a turn costs the turn, not the conversation. A
    record holds how many of the kept messages stay (`keep`) and the ones that follow
    (`add`), so a client that edits its history is kept as it sent it (S6).

    Below `~/.webagents/sessions/` nothing is read or written through a link (one caller's
    folder linked to another's would hand one the other's conversations): it is a
    `SessionLinkError`. Limits: `caller_sessions` conversations and `caller_session_bytes`
    bytes of them per caller other than the owner, `owner_sessions` and `owner_session_bytes`
    for the owner, `channel_senders` channel senders and `jwt_callers` JWT callers with any.
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
        self.caller_sessions = caller_sessions
        self.owner_sessions = owner_sessions
        self.caller_session_bytes = caller_session_bytes
        self.owner_session_bytes = owner_session_bytes
        self.newcomers = Newcomers(
            {"channel_senders": channel_senders, "jwt_callers": jwt_callers},
            log=log,
            skill="session",
            kept="conversations",
        )
        self._logged: set[str] = set()
        """Limits already logged as reached (once each, not for every refused request)."""

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

    def admit(self, namespace: str) -> None:
        """SessionLimitError when a new conversation of this caller would pass a limit."""
        dir_fd = self._open_folder(namespace, create=False)
        if dir_fd is None:
            self._admit_newcomer(namespace)
            return
        try:
            self._check_room(namespace, dir_fd)
            self._check_bytes(namespace, dir_fd, None, 0)
        finally:
            os.close(dir_fd)

    def save(
        self, namespace: str, session: SessionFile, *, since: Version | None = None
    ) -> Version:
        """Keep the session, replacing what was kept under its id (never a damaged file).

        Given the version it was loaded or last saved as, and the files unchanged since, only
        what changed is appended to the journal; otherwise `<id>.json` is written whole.
        """
        path = self.path(namespace, session["id"])
        session["updated"] = datetime.now(UTC).isoformat()
        with self._locked(namespace) as dir_fd:
            state = _state(path.name, dir_fd)
            if since is not None and state == since.snapshot:
                appended = self._append(namespace, path, dir_fd, session, since)
                if appended is not None:
                    return appended
            generation = 0
            if state is not None:
                # Changed since it was read, or never read here: it must be a session file
                # (not a hand edit, nor another program's) before it is replaced.
                current = read_session(path, dir_fd=dir_fd)
                generation = current[1].generation + 1 if current else 0
            else:
                self._check_room(namespace, dir_fd)  # under the lock: no two pass at once
            session["generation"] = generation
            data = _dumps(session)
            self._check_bytes(namespace, dir_fd, session["id"], len(data))
            info = _refused_links(path, lambda: write_at(dir_fd, path.name, data, locked=True))
            with contextlib.suppress(FileNotFoundError):
                os.unlink(_journal(path).name, dir_fd=dir_fd)
            snapshot = (info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
            prompt = session.get("system_prompt")
            return Version(snapshot, 0, generation, session["messages"], prompt)

    def _append(
        self, namespace: str, path: Path, dir_fd: int, session: SessionFile, since: Version
    ) -> Version | None:
        """Append the change to the journal, or None when the file should be written whole."""
        journal = _journal(path)
        try:
            size = os.stat(journal.name, dir_fd=dir_fd, follow_symlinks=False).st_size
        except FileNotFoundError:
            size = 0
        if size != since.journal or size > max(since.snapshot[1] // 4, JOURNAL_MIN_FOLD):
            return None  # changed meanwhile, a torn record to drop, or time to fold it in
        if session.get("system_prompt") != since.system_prompt:
            return None  # records do not carry the prompt: the file takes it
        messages = session["messages"]
        keep = _common_prefix(since.messages, messages)
        record = {
            "generation": since.generation,
            "keep": keep,
            "add": messages[keep:],
            "title": session["title"],
            "updated": session["updated"],
            "usage": session["usage"],
            "compaction": session.get("compaction"),
        }
        line = _dumps(record) + b"\n"
        if self._over_bytes(namespace, dir_fd, session["id"], since.snapshot[1] + size + len(line)):
            return None  # written whole, it may take less (a shorter conversation): see there
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
        fd = _refused_links(
            journal, lambda: open_file_at(dir_fd, journal.name, flags, where=journal)
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
                os.unlink(_journal(path).name, dir_fd=dir_fd)
        return True

    # -- limits ---------------------------------------------------------------------------------

    def _check_room(self, namespace: str, dir_fd: int) -> None:
        cap = self.owner_sessions if namespace == OWNER_NAMESPACE else self.caller_sessions
        if cap is None:
            return
        kept = sum(
            1
            for entry in os.scandir(dir_fd)
            if entry.name.endswith(".json") and entry.is_file(follow_symlinks=False)
        )
        if kept < cap:
            return
        self._log_once(
            namespace,
            "session: %s keeps %d conversations, the most this agent keeps for one caller",
            self.folder(namespace),
            kept,
        )
        whose = "its owner" if namespace == OWNER_NAMESPACE else "each caller"
        raise SessionLimitError(
            f"this agent keeps at most {cap} conversations for {whose}, and yours are all "
            "kept; continue one of them (its metadata.session_id), or send no "
            "metadata.session_id to be answered without keeping the conversation"
        )

    def _check_bytes(self, namespace: str, dir_fd: int, session_id: str | None, size: int) -> None:
        """Refuse a save that makes the caller's kept conversations pass their bytes limit
        (see `_over_bytes`), with a message for the caller; the owner's log says so once."""
        over = self._over_bytes(namespace, dir_fd, session_id, size)
        if over is None:
            return
        cap, total, after = over
        owner = namespace == OWNER_NAMESPACE
        self._log_once(
            f"{namespace} bytes",
            "session: %s: a conversation was not kept: this caller's would take %d bytes, and "
            "this agent keeps at most %d for %s (the session skill's %s setting)",
            self.folder(namespace),
            after,
            cap,
            "its owner" if owner else "one caller",
            "owner_session_bytes" if owner else "caller_session_bytes",
        )
        made = (
            f"yours take {total}"
            if session_id is None
            else f"keeping this turn would make {after}, so it was not kept"
        )
        raise SessionLimitError(
            f"this agent keeps at most {cap} bytes of conversations for "
            f"{'its owner' if owner else 'each caller'}, and {made}; send a shorter "
            "conversation under a kept metadata.session_id (what a request carries replaces "
            "what was kept), or send no metadata.session_id to be answered without keeping "
            "the conversation"
        )

    def _over_bytes(
        self, namespace: str, dir_fd: int, session_id: str | None, size: int
    ) -> tuple[int, int, int] | None:
        """(limit, bytes kept, bytes after) when a save passes the caller's bytes limit:
        `session_id`'s file and journal would take `size` bytes (None: a new conversation,
        over once what is kept fills the limit). A save that keeps no more than before (a
        shorter conversation under the same id) is never over.

        The folder is read afresh each time, under the lock: another process may have kept
        conversations meanwhile, and a journal grows without the folder changing."""
        owner = namespace == OWNER_NAMESPACE
        cap = self.owner_session_bytes if owner else self.caller_session_bytes
        if cap is None:
            return None
        sizes = _kept_bytes(dir_fd)
        total = sum(sizes.values())
        if session_id is None:
            return (cap, total, total) if total >= cap else None
        after = total - sizes.get(session_id, 0) + size
        return (cap, total, after) if after > cap and after > total else None

    def _admit_newcomer(self, namespace: str) -> None:
        """Refuse a new channel sender's or JWT caller's folder past `channel_senders` or
        `jwt_callers` (a bridge or an issuer could otherwise make folders without end)."""
        refused = self.newcomers.refusal(namespace, self.namespaces_of)
        if refused is not None:
            raise SessionLimitError(
                f"{refused}; send no metadata.session_id to be answered without keeping the "
                "conversation"
            )

    def namespaces_of(self, kind: Kind) -> int:
        """How many callers of a kind (channel senders, JWT callers) have a folder here."""
        return count_marked(self.root / "callers", NAMESPACE_FILE, kind.prefix)

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

    def _log_once(self, what: str, message: str, *args: object) -> None:
        if what not in self._logged:
            self._logged.add(what)
            log.warning(message, *args)

    # -- folders --------------------------------------------------------------------------------

    def _open_folder(self, namespace: str, *, create: bool) -> int | None:
        """A descriptor of the namespace's folder (None when missing and not `create`), never
        reached through a link below the sessions folder; a caller's folder made here gets
        its marker."""
        parts = (*self._parts, *self._folder_parts(namespace))
        where = self.folder(namespace)
        if create and namespace != OWNER_NAMESPACE and not os.path.lexists(where):
            self._admit_newcomer(namespace)
        dir_fd = _refused_links(where, lambda: open_private_dir(self.base, parts, create=create))
        if dir_fd is None or not create or namespace == OWNER_NAMESPACE:
            return dir_fd
        try:
            if _state(NAMESPACE_FILE, dir_fd) is None:
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
            flags = os.O_RDWR | os.O_CREAT
            fd = _refused_links(lock, lambda: open_file_at(dir_fd, lock.name, flags, where=lock))
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                yield dir_fd
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)
        finally:
            os.close(dir_fd)


T = TypeVar("T")


def _refused_links(where: Path, action: Callable[[], T]) -> T:
    """`action`, a `LinkRefused` on its way as a SessionLinkError."""
    try:
        return action()
    except LinkRefused as exc:
        raise _link_error(exc) from None


def _link_error(exc: LinkRefused) -> SessionLinkError:
    return SessionLinkError(f"{exc.strerror}; the conversations there are neither read nor kept")


def read_session(
    path: str | Path, *, dir_fd: int | None = None
) -> tuple[SessionFile, Version] | None:
    """The conversation kept at `<id>.json` (a dict of the `SessionFile` shape), its journal
    applied, and its version; None when there is none. SessionError (and the files left as
    they are) when either is damaged. `dir_fd`: the folder `path` is in, opened already (the
    file is then opened by its name in it)."""
    path = Path(path)
    found = _read_plain(path, dir_fd)
    if found is None:
        return None
    raw, info = found
    session = _parse(raw, path)
    generation = session.get("generation", 0)
    if not isinstance(generation, int):
        raise SessionError(f"{path} is not a session file (generation); it is left as it is")
    journal = _replay(_journal(path), generation, session, dir_fd)
    snapshot = (info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
    version = Version(
        snapshot, journal, generation, session["messages"], session.get("system_prompt")
    )
    return session, version


def _journal(path: Path) -> Path:
    return path.with_name(f".{path.stem}.journal")


def _read_plain(path: Path, dir_fd: int | None) -> tuple[bytes, os.stat_result] | None:
    """A kept file's bytes and stat, never through a link (a link is a SessionLinkError, as
    on the write paths: not a damaged file); None when there is none."""
    try:
        fd = os.open(
            path.name if dir_fd is not None else path,
            os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
            dir_fd=dir_fd,
        )
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EMLINK):  # what O_NOFOLLOW meets a link with
            raise _link_error(LinkRefused(path, "a symbolic link or not a plain file")) from None
        reason = exc.strerror or type(exc).__name__
        raise SessionError(f"{path} cannot be read ({reason}); it is left as it is") from None
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(file.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise SessionError(f"{path} is not a plain file; it is left as it is")
        return file.read(), info


def _kept_bytes(dir_fd: int) -> dict[str, int]:
    """The bytes of each conversation kept in a folder (its file and its journal), by id."""
    sizes: dict[str, int] = {}
    with os.scandir(dir_fd) as entries:
        for entry in entries:
            name = entry.name
            if name.endswith(".json"):
                session_id = name[: -len(".json")]
            elif name.startswith(".") and name.endswith(".journal"):
                session_id = name[1 : -len(".journal")]
            else:
                continue
            try:
                info = entry.stat(follow_symlinks=False)
            except FileNotFoundError:  # removed meanwhile
                continue
            if stat.S_ISREG(info.st_mode):
                sizes[session_id] = sizes.get(session_id, 0) + info.st_size
    return sizes


def _state(name: str, dir_fd: int) -> tuple[int, int, int, int] | None:
    try:
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    return (info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


def _common_prefix(before: list[Message], after: list[Message]) -> int:
    n = 0
    for old, new in zip(before, after, strict=False):
        if old is not new and old != new:
            break
        n += 1
    return n


def _replay(journal: Path, generation: int, session: SessionFile, dir_fd: int | None) -> int:
    """Apply the journal's records of this generation to `session`; the bytes that are whole
    records (a last record cut short by a crash was never kept, and is not counted)."""
    found = _read_plain(journal, dir_fd)
    if found is None:
        return 0
    raw = found[0]
    whole = raw.rfind(b"\n") + 1
    if whole == 0:
        return 0 if not raw else -1
    try:  # one parse for the whole journal; a damaged line is found line by line below
        records: Any = orjson.loads(b"[" + raw[: whole - 1].replace(b"\n", b",") + b"]")
    except orjson.JSONDecodeError:
        records = None
    messages = session["messages"] = list(session["messages"])
    last: dict[str, Any] | None = None
    for number, record in enumerate(records or raw[:whole].splitlines(), 1):
        try:
            if records is None:
                record = orjson.loads(record)
            found = record["generation"]
            keep, add = record["keep"], record["add"]
            if not (type(found) is int and type(keep) is int and keep >= 0 and type(add) is list):
                raise TypeError
            if not all(_is_message(m) for m in add):
                raise TypeError
        except (ValueError, KeyError, TypeError):
            raise SessionError(
                f"{journal}:{number} is not a session record; it is left as it is"
            ) from None
        if found != generation:
            continue  # written before the snapshot was, and folded into it already
        del messages[keep:]
        messages.extend(add)
        last = record
    if last is not None:
        try:
            session["title"] = str(last["title"])
            session["updated"] = str(last["updated"])
            session["usage"] = dict(last["usage"])
            if last.get("compaction") is not None:
                session["compaction"] = dict(last["compaction"])
            else:
                session.pop("compaction", None)
        except (KeyError, TypeError, ValueError):
            raise SessionError(f"{journal} ends in a damaged record; it is left as it is") from None
    return whole if whole == len(raw) else -1


def _dumps(value: Any) -> bytes:
    """JSON bytes; text that is not valid Unicode (a lone surrogate) or a number JSON readers
    cannot hold is kept as near as can be, rather than failing after the turn was answered."""
    try:
        return orjson.dumps(value)
    except orjson.JSONEncodeError:
        return orjson.dumps(_clean(value))


def _clean(value: Any) -> Any:
    if isinstance(value, str):
        return value.encode("utf-8", "replace").decode("utf-8")
    if isinstance(value, bool) or value is None or isinstance(value, float):
        return value
    if isinstance(value, int):
        return value if -(2**63) <= value < 2**64 else str(value)
    if isinstance(value, dict):
        return {_clean(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return str(value)


def _is_message(value: Any) -> bool:
    return isinstance(value, dict) and isinstance(value.get("role"), str)


def _parse(raw: bytes, path: Path) -> SessionFile:
    try:
        data: Any = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise SessionError(
            f"{path} is not a session file (not JSON); it is left as it is"
        ) from None
    required = {
        "format": int,
        "id": str,
        "agent": str,
        "created": str,
        "updated": str,
        "title": str,
        "messages": list,
        "usage": dict,
    }
    if not isinstance(data, dict) or any(
        not isinstance(data.get(name), kind) for name, kind in required.items()
    ):
        raise SessionError(f"{path} is not a session file (fields missing); it is left as it is")
    if data["format"] != FORMAT:
        raise SessionError(
            f"{path} has session format {data['format']}, this version reads {FORMAT}; "
            "it is left as it is"
        )
    if data["id"] != path.stem:
        raise SessionError(
            f"{path} holds the conversation {data['id']!r}, not {path.stem!r}; it is left as it is"
        )
    if not all(_is_message(m) for m in data["messages"]) or not isinstance(
        data.get("system_prompt", ""), str
    ):
        raise SessionError(f"{path} is not a session file (messages); it is left as it is")
    return cast(SessionFile, data)
