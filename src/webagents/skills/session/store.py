"""Conversations kept on this machine (S7): one JSON file per conversation, per caller.

    ~/.webagents/sessions/<folder>/<agent>/<id>.json                  the owner's
    ~/.webagents/sessions/<folder>/<agent>/callers/<hash>/<id>.json   every other caller's

`<folder>` names the agent's folder (readable, plus a hash of its absolute path, so two
folders never share one), `<hash>` the caller's namespace. A conversation id only ever names
a conversation of the caller who sent it. Files are 0600 and folders 0700; writes are atomic,
and a file that is not a session file is reported and never overwritten.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NotRequired, Protocol, TypedDict, cast

import orjson

from ..._files import atomic_write, ensure_private_dir, ensure_private_file
from ...caller import OWNER_NAMESPACE
from ...context import is_conversation_id
from ...errors import WebAgentsError
from ...home import sessions_dir
from ...model import Message

FORMAT = 1
TITLE_LIMIT = 80
KNOWN_FILES = 512
"""Files whose last state this process remembers, so it need not re-read them to save."""


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


class SessionError(WebAgentsError):
    """A session cannot be kept or read; the message says which file and why."""


@dataclass(frozen=True, slots=True)
class SessionSummary:
    id: str
    title: str
    updated: str
    turns: int


class SessionStore(Protocol):
    """Where conversations are kept; a second backend (the portal) implements the same."""

    def load(self, namespace: str, session_id: str) -> SessionFile | None: ...

    def save(self, namespace: str, session: SessionFile) -> None: ...

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
    """Conversations in `~/.webagents/sessions/` (or the profile's), per caller."""

    def __init__(self, agent_directory: Path, agent: str, *, profile: str | None = None) -> None:
        self.root = sessions_dir(profile) / agent_folder_name(agent_directory) / agent
        self.agent = agent
        self.problems: list[str] = []
        self._known: OrderedDict[Path, tuple[int, int, int]] = OrderedDict()
        """(inode, size, mtime) of files as this store last read or wrote them (valid ones)."""

    def folder(self, namespace: str) -> Path:
        if namespace == OWNER_NAMESPACE:
            return self.root
        if not namespace.startswith("caller:"):
            raise SessionError(
                f"conversations are kept for verified callers only, not {namespace!r}"
            )
        return self.root / "callers" / caller_hash(namespace)

    def path(self, namespace: str, session_id: str) -> Path:
        if not is_conversation_id(session_id):
            raise SessionError(
                f"{session_id!r} is not a conversation id: use 1-128 characters of "
                "A-Z a-z 0-9 . _ - (and not '..')"
            )
        return self.folder(namespace) / f"{session_id}.json"

    def load(self, namespace: str, session_id: str) -> SessionFile | None:
        path = self.path(namespace, session_id)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise SessionError(
                f"{path} cannot be read ({exc.strerror}); it is left as it is"
            ) from None
        with os.fdopen(fd, "rb") as file:
            info = os.fstat(file.fileno())
            session = _parse(file.read(), path)
        self._remember(path, (info.st_ino, info.st_size, info.st_mtime_ns))
        return session

    def save(self, namespace: str, session: SessionFile) -> None:
        """Keep the session (replacing the file of the same id, never one that is unreadable)."""
        path = self.path(namespace, session["id"])
        with self._locked(path.parent):
            try:
                info = os.lstat(path)
            except FileNotFoundError:
                pass
            else:
                if self._known.get(path) != (info.st_ino, info.st_size, info.st_mtime_ns):
                    # Changed since this store read or wrote it: saving must not replace a
                    # file that is not a session file (a hand edit, another program's).
                    self.load(namespace, session["id"])
            session["updated"] = datetime.now(UTC).isoformat()
            atomic_write(path, orjson.dumps(session))
            info = os.lstat(path)
            self._remember(path, (info.st_ino, info.st_size, info.st_mtime_ns))

    def _remember(self, path: Path, state: tuple[int, int, int]) -> None:
        self._known[path] = state
        self._known.move_to_end(path)
        while len(self._known) > KNOWN_FILES:
            self._known.popitem(last=False)

    def recent(self, namespace: str, limit: int = 20) -> list[SessionSummary]:
        """The newest conversations first; unreadable files are noted in `problems`."""
        folder = self.folder(namespace)
        found: list[SessionSummary] = []
        self.problems = []
        for path in folder.glob("*.json") if folder.is_dir() else []:
            try:
                session = self.load(namespace, path.stem)
            except SessionError as exc:
                self.problems.append(str(exc))
                continue
            if session is None:  # removed meanwhile
                continue
            turns = sum(1 for m in session["messages"] if m.get("role") == "user")
            found.append(SessionSummary(session["id"], session["title"], session["updated"], turns))
        found.sort(key=lambda s: s.updated, reverse=True)
        return found[:limit]

    @contextlib.contextmanager
    def _locked(self, folder: Path) -> Iterator[None]:
        ensure_private_dir(folder)
        fd = os.open(ensure_private_file(folder / ".lock"), os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


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
    return cast(SessionFile, data)
