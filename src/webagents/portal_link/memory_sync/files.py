"""What the portal sync keeps on this machine (P7): its outbox, its state, its credential.

`<agent folder>/.webagents/portal-sync/` (0700) holds:

- `outbox.jsonl` (0600): every durable local write and forget, one JSON line each, appended
  and fsynced before the write is acknowledged, so a change made offline (or right before a
  crash) waits here until the portal answers. Appends take a short `flock` on the file;
  a torn last line (a crash mid-append: never acknowledged) is closed off and skipped.
- `state.json` (0600, written atomically): how far the outbox was pushed (`offset`), the
  cursor of each namespace's pull, the content hash of each entry as last seen in the portal
  (`bases`: the `content_sha256` precondition of the next push), the last sync and the
  conflicts found.
- `refused.jsonl` (0600): the outbox lines the portal refused for good (a 4xx that no
  retry changes: content it cannot store, over its size limit), each with the portal's
  message, set aside so the lines behind them go on; /memory shows them.
- `.lock`: one sync round at a time, across the agent's processes. Every save of the state
  happens under it, and a round starts by removing the temporary files of a save that a
  stopped process left.

It also holds what both halves of the sync (`push`, `pull`) and their entry point
(`sync`) speak: an entry's id and content hash, an outbox line, and times.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..._files import open_file_at, open_private_dir, write_at
from ...errors import ConfigError
from ...home import agent_key_file, is_agent_id, webagents_home
from ..login import AGENT_TOKEN_ENV, agent_key, load_login, portal_url

log = logging.getLogger("webagents.memory")

SYNC_FOLDER = "portal-sync"
OUTBOX = "outbox.jsonl"
STATE = "state.json"
LOCK = ".lock"
REFUSED = "refused.jsonl"
MAX_CONFLICTS = 50


def portal_hash(content: str) -> str:
    """The entry's content hash as the portal keeps it (`content_sha256`): hex SHA-256."""
    return hashlib.sha256(content.encode("utf-8")).hexdigest()


def entry_id(namespace: str, key: str) -> str:
    return f"{namespace}\n{key}"


def now() -> str:
    return datetime.now(UTC).isoformat()


def when(value: object) -> datetime:
    """A time of a line or of the portal's (`...Z`); the earliest there is when unreadable."""
    try:
        found = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return datetime.min.replace(tzinfo=UTC)
    return found if found.tzinfo else found.replace(tzinfo=UTC)


def local_time(at: datetime) -> str:
    """The portal's time (`...Z`) as the notes here write theirs (`...+00:00`; UTC where the
    portal named no zone)."""
    return (at if at.tzinfo else at.replace(tzinfo=UTC)).isoformat()


def put_line(namespace: str, key: str, content: str, description: str, at: str) -> dict[str, Any]:
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


@dataclass(frozen=True)
class PortalLink:
    """Where the agent's memory store is and the agent's key for it."""

    url: str
    key: str
    agent_id: str | None


def portal_link(folder: Path, profile: str | None) -> PortalLink:
    """The portal and the agent's key (login.agent_key: the key `webagents publish` kept for
    the folder's `link.agentId`, else `WEBAGENTS_AGENT_TOKEN`); the portal by portal_url's
    rules (the link's portal, else the last login's, ROBUTLER_API_URL before either)."""
    config_file = folder / ".webagents" / "config.json"
    link: dict[str, Any] = {}
    with contextlib.suppress(FileNotFoundError):
        try:
            config = json.loads(config_file.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise ConfigError(
                f"{config_file} is not valid JSON ({exc}): fix or remove it"
            ) from None
        if isinstance(config, dict) and isinstance(config.get("link"), dict):
            link = config["link"]
    agent_id = link.get("agentId") if is_agent_id(link.get("agentId")) else None
    key = agent_key(str(agent_id) if agent_id else None, profile)
    if key is None:
        if agent_id is None:
            raise ConfigError(
                "memory: portal: true keeps notes in the portal's memory store, which needs the "
                "agent's platform key: publish the agent (webagents publish) or set "
                f"{AGENT_TOKEN_ENV}"
            )
        raise ConfigError(
            f"memory: portal: true needs this machine's key for the agent "
            f"({agent_key_file(str(agent_id), profile)}, none yet): run webagents publish in "
            "the agent's folder (on another machine than the first it links the same agent "
            f"and gives this machine its own key), or set {AGENT_TOKEN_ENV}"
        )
    remembered = link.get("portal") if isinstance(link.get("portal"), str) else None
    if remembered is None:
        login = load_login(profile)
        remembered = login.portal if login is not None else None
    return PortalLink(portal_url(None, remembered), key, str(agent_id) if agent_id else None)


def kept_cursor(given: object) -> str | None:
    """A pull's cursor as this machine keeps it: the portal's string as it came (SPEC P5:
    opaque, sent back unchanged). An integer, as older portals answered and older versions
    kept in state.json, is the same cursor written out; anything else is no cursor."""
    if isinstance(given, str):
        return given
    if isinstance(given, int) and not isinstance(given, bool):
        return str(given)
    return None


@dataclass
class SyncState:
    offset: int = 0
    """Bytes of the outbox pushed (or found already in the portal)."""
    cursors: dict[str, str] = field(default_factory=dict)
    bases: dict[str, str] = field(default_factory=dict)
    """entry_id -> the content hash the portal had when this machine last saw the entry."""
    last_sync: str | None = None
    conflicts: list[dict[str, str]] = field(default_factory=list)

    def to_json(self) -> bytes:
        data = {
            "offset": self.offset,
            "cursors": self.cursors,
            "bases": self.bases,
            "last_sync": self.last_sync,
            "conflicts": self.conflicts[-MAX_CONFLICTS:],
        }
        return (json.dumps(data, ensure_ascii=False) + "\n").encode("utf-8")


class SyncFiles:
    """The sync's folder under `<agent folder>/.webagents/`."""

    def __init__(self, dot_webagents: Path) -> None:
        self.base = dot_webagents
        self.folder = dot_webagents / SYNC_FOLDER

    @contextlib.contextmanager
    def _dir(self) -> Iterator[int]:
        dir_fd = open_private_dir(self.base, (SYNC_FOLDER,))
        assert dir_fd is not None
        try:
            yield dir_fd
        finally:
            os.close(dir_fd)

    # -- the outbox ---------------------------------------------------------------------------

    def append(self, *lines: dict[str, Any]) -> None:
        """Add changes to the outbox, durably (fsync) before returning: only then is the
        write they record acknowledged."""
        if not lines:
            return
        data = b"".join(
            (json.dumps(line, ensure_ascii=False) + "\n").encode("utf-8") for line in lines
        )
        with self._dir() as dir_fd, self._outbox(dir_fd) as fd:
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                data = b"\n" + data  # a torn line from a crash mid-append is closed off
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)

    @contextlib.contextmanager
    def _outbox(self, dir_fd: int) -> Iterator[int]:
        where = self.folder / OUTBOX
        fd = open_file_at(dir_fd, OUTBOX, os.O_RDWR | os.O_CREAT | os.O_APPEND, where=where)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield fd
        finally:
            os.close(fd)  # closing releases the lock

    def pending(self, offset: int) -> list[tuple[int, dict[str, Any]]]:
        """The changes after `offset`, each with the offset right after it, in order."""
        with self._dir() as dir_fd, self._outbox(dir_fd) as fd:
            size = os.fstat(fd).st_size
            if offset > size:  # the outbox was emptied or replaced by hand: read it all
                offset = 0
            raw = os.pread(fd, size - offset, offset)
        found: list[tuple[int, dict[str, Any]]] = []
        position = offset
        for line in raw.split(b"\n")[:-1]:  # a last line without its newline is torn
            position += len(line) + 1
            try:
                change = json.loads(line)
            except ValueError:
                log.warning(
                    "memory: a torn line of the sync outbox is skipped (never acknowledged)"
                )
                continue
            if isinstance(change, dict):
                found.append((position, change))
        return found

    def compact(self, state: SyncState) -> None:
        """Empty the outbox once all of it was pushed. The state says offset 0 first, then the
        file is emptied: a crash between the two resends what was pushed, which the push finds
        already in the portal (the same content hash) and does not apply twice."""
        with self._dir() as dir_fd, self._outbox(dir_fd) as fd:
            if os.fstat(fd).st_size != state.offset:
                return  # written meanwhile: emptied at a later round
            state.offset = 0
            self._save(dir_fd, state)
            os.ftruncate(fd, 0)
            os.fsync(fd)

    # -- the state ----------------------------------------------------------------------------

    def has_state(self) -> bool:
        return os.path.lexists(self.folder / STATE)

    def load(self) -> SyncState:
        path = self.folder / STATE
        try:
            data = json.loads(path.read_bytes())
            return SyncState(
                offset=int(data["offset"]),
                cursors={
                    str(k): cursor
                    for k, v in data["cursors"].items()
                    if (cursor := kept_cursor(v)) is not None
                },
                bases={str(k): str(v) for k, v in data["bases"].items()},
                last_sync=data.get("last_sync"),
                conflicts=list(data.get("conflicts") or []),
            )
        except FileNotFoundError:
            return SyncState()
        except (ValueError, KeyError, TypeError, AttributeError):
            # Not lost: everything is pulled again and every outbox line pushed again, which
            # the content hashes make harmless. The damaged file is kept beside it.
            log.error(
                "memory: %s is damaged: it is kept as %s.damaged and the sync starts over",
                path,
                STATE,
            )
            with contextlib.suppress(OSError):
                os.replace(path, path.with_name(STATE + ".damaged"))
            return SyncState()

    def save(self, state: SyncState) -> None:
        with self._dir() as dir_fd:
            self._save(dir_fd, state)

    def _save(self, dir_fd: int, state: SyncState) -> None:
        write_at(dir_fd, STATE, state.to_json())

    @contextlib.contextmanager
    def round(self) -> Iterator[bool]:
        """One sync round at a time across processes: True when this one may run now."""
        with self._dir() as dir_fd:
            fd = open_file_at(dir_fd, LOCK, os.O_RDWR | os.O_CREAT, where=self.folder / LOCK)
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    yield False
                    return
                _sweep(dir_fd)
                yield True
            finally:
                os.close(fd)

    # -- the lines the portal refused for good ------------------------------------------------

    def set_aside(self, line: dict[str, Any], message: str, at: str) -> None:
        """Keep an outbox line the portal refused for good (durably, before the outbox's
        offset moves past it), with the portal's message."""
        data = json.dumps({"line": line, "message": message, "at": at}, ensure_ascii=False)
        with self._dir() as dir_fd:
            where = self.folder / REFUSED
            fd = open_file_at(dir_fd, REFUSED, os.O_WRONLY | os.O_CREAT | os.O_APPEND, where=where)
            try:
                os.write(fd, (data + "\n").encode("utf-8"))
                os.fsync(fd)
            finally:
                os.close(fd)

    def refused(self) -> list[dict[str, Any]]:
        """The lines set aside, oldest first (a torn last line is skipped)."""
        try:
            raw = (self.folder / REFUSED).read_bytes()
        except FileNotFoundError:
            return []
        found = []
        for text in raw.splitlines():
            with contextlib.suppress(ValueError):
                item = json.loads(text)
                if isinstance(item, dict) and isinstance(item.get("line"), dict):
                    found.append(item)
        return found


def _sweep(dir_fd: int) -> None:
    """Remove the state's temporary files that a process stopped mid-save left (killed, or
    ended while its sync thread was saving). Called under the round's lock: every save of
    the state happens under it, so no temporary file found then is being written."""
    for name in os.listdir(dir_fd):
        if name.startswith(f".{STATE}.") and name.endswith(".tmp"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=dir_fd)
            log.info("memory: removed %s, left by a sync stopped while it saved", name)


def notes_root(dot_webagents: Path, profile: str | None, portal_alone: bool) -> Path:
    """Where the note files are: the agent's folder, or with `{local: false, portal: true}`
    a cache under the webagents home (the notes are the portal's; none in the agent's folder,
    which may be committed), one per agent folder."""
    if not portal_alone:
        return dot_webagents / "memory"
    folder = str(dot_webagents.parent.resolve())
    name = hashlib.sha256(folder.encode("utf-8")).hexdigest()[:32]
    return webagents_home(profile) / "memory-cache" / name
