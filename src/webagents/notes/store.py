"""The notes of one agent as files, one folder per namespace, written atomically.

The files are the truth; one file's format is `note_file`'s. Writers take a per-namespace
lock (a thread lock in this process and `flock` across processes), and every change bumps
the namespace's generation so that other processes know their index is stale. Many notes
written together (the portal sync's pull) are `note_batch`'s, under the same locks and checks.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from .._files import LinkRefused, count_marked, exclusive, open_lock, open_private_dir, write_at
from ..caller import OWNER_NAMESPACE, SHARED_NAMESPACE
from ..errors import ToolError
from ..newcomers import Kind, Newcomers
from .layout import NAMESPACE_FILE, is_key, namespace_folder
from .note_file import (
    FileState,
    Note,
    NoteFormatError,
    file_state,
    now,
    one_line,
    parse_note,
    read_plain,
)

LOCK_FILE = ".lock"
SNAPSHOTS = ".sessions"
_OWNERS = (OWNER_NAMESPACE, SHARED_NAMESPACE)

log = logging.getLogger("webagents.memory")


@dataclass(frozen=True, slots=True)
class Limits:
    """How much one namespace may keep; None: no limit."""

    notes: int | None = None
    """Note files, summaries (episodes) included."""
    note_bytes: int | None = None
    """Their bytes on disk, front matter included."""


@dataclass(frozen=True, slots=True)
class Change:
    """What a write or forget left behind, for the writer's own index."""

    generation: int
    folder_mtime_ns: int
    """The namespace folder's mtime right after the change, read under the lock."""
    note: Note | None
    state: FileState | None
    before: tuple[int, int]
    """The namespace's (generation, folder mtime) right before the change, under the lock."""


class NoteChanged(Exception):
    """A write or forget with `expect` found the note changed since the caller read it."""


class NoteStore:
    """The note files of one agent, by namespace."""

    def __init__(
        self,
        root: Path,
        *,
        caller_limits: Limits | None = None,
        owner_limits: Limits | None = None,
        channel_senders: int | None = None,
        jwt_callers: int | None = None,
    ) -> None:
        self.root = root
        self.caller_limits = caller_limits or Limits()
        """Limits of each caller's namespace."""
        self.owner_limits = owner_limits or Limits()
        """Limits of `owner` and of `shared`, each."""
        self.newcomers = Newcomers(
            {"channel_senders": channel_senders, "jwt_callers": jwt_callers},
            log=log,
            skill="memory",
            kept="notes",
        )
        """How many channel senders and JWT callers may have a namespace."""
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        self._folders: dict[str, Path] = {}
        self._usage: dict[str, tuple[int, int, int, int]] = {}
        """(generation, folder mtime, notes, bytes) of limited namespaces, as last written."""

    # -- where ------------------------------------------------------------------------------

    def folder(self, namespace: str) -> Path:
        found = self._folders.get(namespace)
        if found is None:
            found = self._folders[namespace] = namespace_folder(self.root, namespace)
        return found

    def namespaces(self) -> list[str]:
        """Every namespace that has a folder: owner, shared, then each caller's."""
        found = [ns for ns in (OWNER_NAMESPACE, SHARED_NAMESPACE) if (self.root / ns).is_dir()]
        callers = self.root / "callers"
        if callers.is_dir():
            for folder in sorted(callers.iterdir()):
                marker = folder / NAMESPACE_FILE
                with contextlib.suppress(OSError, UnicodeDecodeError):
                    namespace = marker.read_text(encoding="utf-8")
                    if namespace_folder(self.root, namespace) == folder:
                        found.append(namespace)
        return found

    def generation(self, namespace: str) -> int:
        """A counter every write and forget in the namespace bumps (0 when never written)."""
        try:
            raw, _ = read_plain(self.folder(namespace) / LOCK_FILE)  # never through a link
            return int(raw.strip() or b"0")
        except (OSError, ValueError, NoteFormatError):
            return 0

    # -- reading ----------------------------------------------------------------------------

    def read(self, namespace: str, key: str) -> Note | None:
        folder = self.folder(namespace)
        if folder.is_symlink():
            return None
        try:
            raw, info = read_plain(folder / f"{key}.md")
        except FileNotFoundError:
            return None
        return parse_note(raw, namespace=namespace, key=key, mtime=info.st_mtime)

    def files(self, namespace: str) -> dict[str, tuple[str, FileState]]:
        """The note files of a namespace, by key, with their path and state."""
        folder = self.folder(namespace)
        found: dict[str, tuple[str, FileState]] = {}
        if folder.is_symlink():
            return found  # a namespace folder is a real folder, never a link elsewhere
        try:
            entries = list(os.scandir(folder))
        except FileNotFoundError:
            return found
        for entry in entries:
            if not entry.name.endswith(".md") or not entry.is_file(follow_symlinks=False):
                continue  # symbolic links and anything but plain files are not notes
            try:
                info = entry.stat(follow_symlinks=False)
            except FileNotFoundError:  # forgotten by another process meanwhile
                continue
            found[entry.name[:-3]] = (
                entry.path,
                file_state(info),
            )
        return found

    def names(self, namespace: str) -> list[tuple[str, str]]:
        """The note files of a namespace as (key, path), without looking inside or at them
        (what a start reads anyway: `load` gives each one's state as it reads it)."""
        folder = self.folder(namespace)
        if folder.is_symlink():
            return []  # a namespace folder is a real folder, never a link elsewhere
        try:
            with os.scandir(folder) as entries:
                return [
                    (entry.name[:-3], entry.path)
                    for entry in entries
                    if entry.name.endswith(".md") and entry.is_file(follow_symlinks=False)
                ]
        except FileNotFoundError:
            return []

    def load(self, namespace: str, key: str, path: str | Path) -> tuple[Note, FileState]:
        """Parse one file found by `files` or `names`, with the state of what was read;
        NoteFormatError when it cannot be read."""
        if not is_key(key):
            raise NoteFormatError("the file name is not a valid key (a-z 0-9 . _ -, 1-64)")
        raw, info = read_plain(path)
        note = parse_note(raw, namespace=namespace, key=key, mtime=info.st_mtime)
        return note, file_state(info)

    # -- writing ----------------------------------------------------------------------------

    def write(
        self,
        namespace: str,
        key: str,
        content: str,
        description: str,
        *,
        kind: str = "note",
        create: bool = False,
        updated: str | None = None,
        expect: Callable[[Note | None], bool] | None = None,
    ) -> Change:
        """Save a note (replacing one with the same key; with `create`, FileExistsError);
        `updated`: when it changed, for a note written elsewhere (the portal sync), else now.

        ToolError when the namespace's limits would be passed; `LinkRefused` when its folder,
        its lock or the note is a link. `expect`: a compare-and-swap (the portal sync's write
        of a note it read before): the note as it is under the lock must pass it, else
        NoteChanged and nothing is written."""
        with self._locked(namespace) as (folder, dir_fd, lock_fd):
            name = f"{key}.md"
            existing = _lstat_at(dir_fd, name)
            if create and existing is not None:
                raise FileExistsError(folder / name)
            note = Note(namespace, key, content, one_line(description), updated or now(), kind)
            before = _generation(lock_fd), os.fstat(dir_fd).st_mtime_ns
            data, usage = self._checked(dir_fd, before, note, existing, expect)
            info = write_at(dir_fd, name, data, locked=True)
            generation = _bump(lock_fd, before[0])
            mtime = os.fstat(dir_fd).st_mtime_ns
            self._counted(namespace, usage, existing, info.st_size, (generation, mtime))
            return Change(generation, mtime, note, file_state(info), before)

    def _checked(
        self,
        dir_fd: int,
        version: tuple[int, int],
        note: Note,
        existing: os.stat_result | None,
        expect: Callable[[Note | None], bool] | None,
    ) -> tuple[bytes, tuple[int, int] | None]:
        """`write`'s checks of `note` under its namespace's lock (`note_batch`'s too): the
        file it replaces (`existing`) can be read, the note is as the writer read it
        (`expect`), the limits pass (`version`: the namespace's, as `_check_limits` takes
        it). The note's bytes, and the namespace's (notes, bytes) when it is limited."""
        if existing is not None:
            self._refuse_unreadable(note.namespace, note.key, dir_fd)
        self._expect(note.namespace, note.key, dir_fd, expect)
        data = note.render().encode("utf-8")
        return data, self._check_limits(note.namespace, dir_fd, version, existing, len(data))

    def _counted(
        self,
        namespace: str,
        usage: tuple[int, int] | None,
        existing: os.stat_result | None,
        size: int,
        version: tuple[int, int],
    ) -> None:
        """What the next write's limit check starts from: `usage` (as `_checked` found it)
        with a note of `size` bytes in place of `existing`, at the namespace's `version`."""
        if usage is not None:
            count = usage[0] + (existing is None)
            total = usage[1] - (existing.st_size if existing else 0) + size
            self._usage[namespace] = (*version, count, total)

    def _moved(self, namespace: str, before: int, after: tuple[int, int]) -> None:
        """This process moved the namespace from generation `before` to `after` (generation,
        folder mtime): a count made at `before` (`_counted`) stands at `after`."""
        usage = self._usage.get(namespace)
        if usage is not None and usage[0] == before:
            self._usage[namespace] = (*after, *usage[2:])

    def forget(
        self, namespace: str, key: str, *, expect: Callable[[Note | None], bool] | None = None
    ) -> Change | None:
        """Remove a note; None when there was none. `expect` as for `write`."""
        with self._locked(namespace) as (_, dir_fd, lock_fd):
            name = f"{key}.md"
            if _lstat_at(dir_fd, name) is None:
                return None
            self._refuse_unreadable(namespace, key, dir_fd)
            self._expect(namespace, key, dir_fd, expect)
            before = _generation(lock_fd), os.fstat(dir_fd).st_mtime_ns
            os.unlink(name, dir_fd=dir_fd)
            generation = _bump(lock_fd, before[0])
            return Change(generation, os.fstat(dir_fd).st_mtime_ns, None, None, before)

    def _expect(
        self, namespace: str, key: str, dir_fd: int, expect: Callable[[Note | None], bool] | None
    ) -> None:
        """NoteChanged unless the note as it is now (read under the lock) passes `expect`."""
        if expect is None:
            return
        try:
            raw, info = read_plain(f"{key}.md", dir_fd=dir_fd)
            note: Note | None = parse_note(raw, namespace=namespace, key=key, mtime=info.st_mtime)
        except FileNotFoundError:
            note = None
        if not expect(note):
            raise NoteChanged(self.folder(namespace) / f"{key}.md")

    def _refuse_unreadable(self, namespace: str, key: str, dir_fd: int) -> None:
        """A ToolError when the note's file cannot be read; `LinkRefused` when it is a link
        (one that could lead this write onto another caller's note), as for its folder."""
        try:
            raw, info = read_plain(f"{key}.md", dir_fd=dir_fd)
            parse_note(raw, namespace=namespace, key=key, mtime=info.st_mtime)
        except FileNotFoundError:
            return
        except NoteFormatError as exc:
            found = _lstat_at(dir_fd, f"{key}.md")
            if found is not None and stat.S_ISLNK(found.st_mode):
                where = self.folder(namespace) / f"{key}.md"
                raise LinkRefused(where, "a symbolic link or not a plain file") from None
            raise ToolError(
                f"the note {key!r} is a file that cannot be read ({exc}); it is left as it is "
                "for the agent's owner to fix by hand or remove (/memory names the file)"
            ) from None

    def limits_of(self, namespace: str) -> Limits:
        return self.owner_limits if namespace in _OWNERS else self.caller_limits

    def _check_limits(
        self,
        namespace: str,
        dir_fd: int,
        version: tuple[int, int],
        existing: os.stat_result | None,
        size: int,
    ) -> tuple[int, int] | None:
        """Refuse a write that passes the namespace's limits (one that shrinks what is kept,
        or replaces a note, always goes through); the namespace's (notes, bytes) when limited.

        `version`: the namespace's (generation, folder mtime) under the lock. While both are
        as this process left them, its count stands (a count reads every file's size: too
        slow for each write); any other writer's change moves one of them."""
        limits = self.limits_of(namespace)
        if limits.notes is None and limits.note_bytes is None:
            return None
        cached = self._usage.get(namespace)
        if cached is not None and cached[:2] == version:
            count, total = cached[2:]
        else:
            count, total = _usage(dir_fd)
        whose = "the owner's" if namespace in _OWNERS else "a caller's"
        if existing is None and limits.notes is not None and count >= limits.notes:
            log.warning("memory: %s is full (%d notes)", self.folder(namespace), count)
            raise ToolError(
                f"no room for a new note: this agent keeps at most {limits.notes} notes "
                f"(summaries included) in {whose} memory; forget one (memory_forget) or "
                "replace one by writing to its key"
            )
        after = total - (existing.st_size if existing is not None else 0) + size
        if limits.note_bytes is not None and after > limits.note_bytes and after > total:
            log.warning("memory: %s is full (%d bytes)", self.folder(namespace), total)
            raise ToolError(
                f"no room: this agent keeps at most {limits.note_bytes} bytes of notes in "
                f"{whose} memory, and this write would make {after}; shorten or forget notes "
                "first"
            )
        return count, total

    def _admit(self, namespace: str) -> None:
        """Refuse a new channel sender's or JWT caller's namespace past `channel_senders` or
        `jwt_callers` (a bridge or an issuer could otherwise make namespaces without end)."""
        if os.path.lexists(self.folder(namespace)):
            return
        refused = self.newcomers.refusal(namespace, self.namespaces_of)
        if refused is not None:
            raise ToolError(f"{refused}; it cannot keep notes for you (ask the agent's owner)")

    def namespaces_of(self, kind: Kind) -> int:
        """How many callers of a kind (channel senders, JWT callers) have a note folder."""
        # Their folder names start so (`channel-...`, `jwt-...`: layout.caller_folder_name).
        names = kind.prefix.removeprefix("caller:").rstrip(":") + "-"
        return count_marked(self.root / "callers", NAMESPACE_FILE, kind.prefix, names=names)

    def _open_namespace(self, namespace: str, *under: str) -> int:
        """A descriptor of the namespace's folder (or of `under` in it), made if missing with
        its marker, never reached through a link; the caller closes it."""
        self._admit(namespace)
        parts = self.folder(namespace).relative_to(self.root).parts
        dir_fd = open_private_dir(self.root, parts)
        assert dir_fd is not None
        try:
            if namespace not in _OWNERS and _lstat_at(dir_fd, NAMESPACE_FILE) is None:
                write_at(dir_fd, NAMESPACE_FILE, namespace.encode("utf-8"))
        except BaseException:
            os.close(dir_fd)
            raise
        if not under:
            return dir_fd
        os.close(dir_fd)
        found = open_private_dir(self.root, (*parts, *under))
        assert found is not None
        return found

    # -- the memory block of each conversation (M6) -----------------------------------------

    def read_snapshot(self, namespace: str, name: str) -> str | None:
        """The memory block kept for a conversation; None when none is kept."""
        parts = self.folder(namespace).relative_to(self.root).parts
        dir_fd = open_private_dir(self.root, (*parts, SNAPSHOTS), create=False)
        if dir_fd is None:
            return None
        try:
            raw, _ = read_plain(name, dir_fd=dir_fd)
        except FileNotFoundError:
            return None
        except NoteFormatError:
            where = self.folder(namespace) / SNAPSHOTS / name
            raise LinkRefused(where, "not a plain file") from None
        finally:
            os.close(dir_fd)
        return raw.decode("utf-8")

    def keep_snapshot(self, namespace: str, name: str, block: str, *, keep: int) -> None:
        """Keep a conversation's memory block, and the `keep` newest blocks of the namespace."""
        dir_fd = self._open_namespace(namespace, SNAPSHOTS)
        try:
            write_at(dir_fd, name, block.encode("utf-8"))
            kept = []
            for entry in os.scandir(dir_fd):
                with contextlib.suppress(FileNotFoundError):
                    kept.append((entry.stat(follow_symlinks=False).st_mtime_ns, entry.name))
            for _, old in sorted(kept, reverse=True)[keep:]:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(old, dir_fd=dir_fd)
        finally:
            os.close(dir_fd)

    @contextlib.contextmanager
    def _locked(self, namespace: str) -> Iterator[tuple[Path, int, int]]:
        """The namespace's folder (made if missing) and its lock file's descriptor, locked:
        both reached without following a link (one could lead this caller's note into
        another's folder, or a lock write onto another file)."""
        folder = self.folder(namespace)
        with self._locks_guard:
            lock = self._locks.setdefault(namespace, threading.Lock())
        with lock:
            dir_fd = self._open_namespace(namespace)
            try:
                with exclusive(open_lock(dir_fd, folder / LOCK_FILE)) as lock_fd:
                    yield folder, dir_fd, lock_fd
            finally:
                os.close(dir_fd)


def _lstat_at(dir_fd: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _usage(dir_fd: int) -> tuple[int, int]:
    """How many note files a namespace folder holds, and their bytes."""
    count = total = 0
    with os.scandir(dir_fd) as entries:
        for entry in entries:
            if entry.name.endswith(".md") and entry.is_file(follow_symlinks=False):
                with contextlib.suppress(FileNotFoundError):
                    total += entry.stat(follow_symlinks=False).st_size
                    count += 1
    return count, total


def _generation(lock_fd: int) -> int:
    try:
        return int(os.pread(lock_fd, 32, 0).strip() or b"0")
    except ValueError:
        return 0


def _bump(lock_fd: int, current: int) -> int:
    """Add one to the namespace's generation, kept in its lock file (a hint, not data);
    `current` was read under the same lock."""
    os.pwrite(lock_fd, b"%020d" % (current + 1), 0)  # fixed width: no truncation needed
    return current + 1
