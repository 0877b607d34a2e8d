"""The notes of one agent as files, one folder per namespace, written atomically.

The files are the truth; one file's format is `note_file`'s. Writers take a per-namespace
lock (a thread lock in this process and `flock` across processes), and every change bumps
the namespace's generation so that other processes know their index is stale.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..._files import atomic_write, ensure_private_dir, ensure_private_file
from ...caller import OWNER_NAMESPACE, SHARED_NAMESPACE
from ...errors import ToolError
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


class NoteStore:
    """The note files of one agent, by namespace."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        self._folders: dict[str, Path] = {}
        self._ready: set[str] = set()
        """Namespaces whose folder, marker and lock file this process has made sure of."""

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
            return int((self.folder(namespace) / LOCK_FILE).read_bytes().strip() or b"0")
        except (OSError, ValueError):
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
    ) -> Change:
        """Save a note (replacing one with the same key; with `create`, FileExistsError)."""
        with self._locked(namespace) as (folder, lock_fd):
            path = folder / f"{key}.md"
            if create and os.path.lexists(path):
                raise FileExistsError(path)
            self._refuse_unreadable(namespace, key, path)
            before = _generation(lock_fd), os.stat(folder).st_mtime_ns
            note = Note(namespace, key, content, one_line(description), now(), kind)
            atomic_write(path, note.render().encode("utf-8"), locked=True)
            info = os.stat(path)
            generation = _bump(lock_fd, before[0])
            return Change(generation, os.stat(folder).st_mtime_ns, note, file_state(info), before)

    def forget(self, namespace: str, key: str) -> Change | None:
        """Remove a note; None when there was none."""
        with self._locked(namespace) as (folder, lock_fd):
            path = folder / f"{key}.md"
            if not os.path.lexists(path):
                return None
            self._refuse_unreadable(namespace, key, path)
            before = _generation(lock_fd), os.stat(folder).st_mtime_ns
            path.unlink()
            generation = _bump(lock_fd, before[0])
            return Change(generation, os.stat(folder).st_mtime_ns, None, None, before)

    def _refuse_unreadable(self, namespace: str, key: str, path: Path) -> None:
        try:
            self.read(namespace, key)
        except NoteFormatError as exc:
            raise ToolError(
                f"the note {key!r} is a file that cannot be read ({exc}); it is left as it is "
                "for the agent's owner to fix by hand or remove (/memory names the file)"
            ) from None

    @contextlib.contextmanager
    def _locked(self, namespace: str) -> Iterator[tuple[Path, int]]:
        folder = self.folder(namespace)
        with self._locks_guard:
            lock = self._locks.setdefault(namespace, threading.Lock())
        with lock:
            if namespace not in self._ready or not folder.is_dir():
                ensure_private_dir(folder)
                if namespace not in (OWNER_NAMESPACE, SHARED_NAMESPACE):
                    marker = folder / NAMESPACE_FILE
                    if not marker.exists():
                        atomic_write(marker, namespace.encode("utf-8"))
                ensure_private_file(folder / LOCK_FILE)
                self._ready.add(namespace)
            fd = os.open(folder / LOCK_FILE, os.O_RDWR)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                yield folder, fd
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)


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
