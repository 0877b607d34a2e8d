"""One kept conversation's files: `<id>.json` (a `SessionFile`) and its journal, read and written.

`<id>.json` holds the conversation whole; `.<id>.journal` beside it holds the turns added
since, one JSON record per line (how many kept messages stay, `keep`, and the ones that follow,
`add`), each naming the generation of the `<id>.json` it follows. Reading applies the records
of the file's generation; a last record cut short by a crash was never kept. A file or record
that is not a session's is a `SessionError`, and the files are left as they are; a link is a
`SessionLinkError`. Where the files are kept, and when a turn is appended or the file written
whole, is the store's (`store.py`).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NotRequired, TypedDict, TypeVar, cast

import orjson

from .._files import LinkRefused
from ..errors import WebAgentsError
from ..model import Message

FORMAT = 1
TITLE_LIMIT = 80


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


class SessionConflict(SessionError):
    """A save that would drop messages of the kept conversation (another writer's turns, or
    earlier ones this conversation lost) without being asked to replace it: nothing written."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        super().__init__(
            f"the kept conversation {session_id!r} has messages this one does not (it was "
            "continued elsewhere after it was loaded here, or this one lost earlier turns); it "
            "is left as it is and this turn was not kept: start the conversation again to go "
            f"on from what is kept (Agent.start with conversation_id={session_id!r}; in the "
            f"chat, /resume {session_id}), or give Agent.start the messages to keep in its "
            "place (messages=...)"
        )
        self.session_id = session_id


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


T = TypeVar("T")


def refused_links(where: Path, action: Callable[[], T]) -> T:
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
    journal = _replay(journal_path(path), generation, session, dir_fd)
    snapshot = (info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
    version = Version(
        snapshot, journal, generation, session["messages"], session.get("system_prompt")
    )
    return session, version


def journal_path(path: Path) -> Path:
    return path.with_name(f".{path.stem}.journal")


def _read_plain(path: Path, dir_fd: int | None) -> tuple[bytes, os.stat_result] | None:
    """A kept file's bytes and stat, never through a link (a link is a SessionLinkError, as
    on the write paths: not a damaged file); None when there is none. A file with a second
    name (a hard link) is refused too: it could be another caller's conversation or journal."""
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
        if info.st_nlink > 1:
            raise _link_error(LinkRefused(path, "a file with another name (a hard link)"))
        return file.read(), info


def journal_record(session: SessionFile, generation: int, keep: int) -> bytes:
    """The journal line that turns the first `keep` of the messages a record of `generation`
    applies to into `session`'s."""
    record = {
        "generation": generation,
        "keep": keep,
        "add": session["messages"][keep:],
        "title": session["title"],
        "updated": session["updated"],
        "usage": session["usage"],
        "compaction": session.get("compaction"),
    }
    return dumps(record) + b"\n"


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


def dumps(value: Any) -> bytes:
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


def file_state(name: str, dir_fd: int) -> tuple[int, int, int, int] | None:
    """What tells a file's versions apart (inode, size, times), None when there is none."""
    try:
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    return (info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


def check_extends(
    path: Path, dir_fd: int, messages: Sequence[Message], since: Version | None
) -> None:
    """SessionConflict when a save of `messages` would be refused now: the conversation kept
    at `path` (in the open folder `dir_fd`) has messages they do not begin with. Read without
    the lock (a save checks again under it), and only when the files changed since `since`
    (None: the conversation was not kept when it was loaded)."""
    state = file_state(path.name, dir_fd)
    if state is None:
        return
    if since is not None and state == since.snapshot:
        journal = file_state(journal_path(path).name, dir_fd)
        if (journal[1] if journal else 0) == since.journal:
            return  # unchanged since this conversation read or wrote it
    current = read_session(path, dir_fd=dir_fd)
    if current is not None and common_prefix(current[0]["messages"], messages) < len(
        current[0]["messages"]
    ):
        raise SessionConflict(path.stem)


def refuse_dropping(kept: Sequence[Message], session: SessionFile) -> None:
    """SessionConflict unless the session's messages begin with every kept one."""
    if common_prefix(kept, session["messages"]) < len(kept):
        raise SessionConflict(session["id"])


def common_prefix(before: Sequence[Message], after: Sequence[Message]) -> int:
    """How many leading messages the two have in common."""
    n = 0
    for old, new in zip(before, after, strict=False):
        if old is not new and old != new:
            break
        n += 1
    return n
