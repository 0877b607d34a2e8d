"""Private files: folders 0700 and files 0600 whatever the umask, written atomically.

Everything webagents keeps about people (notes, conversations, what was typed in the chat)
goes through here. The stores of notes and conversations write relative to a folder opened
without following links (`open_private_dir`, `write_at`, `open_file_at`): a folder or file
on the way that is a symbolic link could lead one caller's write into another's place, so it
is refused (`LinkRefused`), never written through, as the readers refuse to read through it.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import stat
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

DIR_MODE = 0o700
FILE_MODE = 0o600
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_REFUSED = (errno.ELOOP, errno.ENOTDIR, errno.EMLINK)
"""What opening a link with O_NOFOLLOW (or a file with O_DIRECTORY) fails with."""


class LinkRefused(OSError):
    """A folder or file on a write path is a symbolic link or not what it should be: nothing
    was written through it. The message names the path, for the owner's log."""

    def __init__(self, path: Path | str, what: str = "a symbolic link or not a folder") -> None:
        super().__init__(
            errno.ELOOP,
            f"{path} is {what}; nothing is written through it (replace it with a real "
            "folder or file, or remove it)",
        )
        self.path = Path(path)


def ensure_private_dir(path: Path) -> Path:
    """Create `path` and any missing parents as 0700; tighten `path` itself if it exists."""
    missing = []
    current = path
    while not current.exists():
        missing.append(current)
        current = current.parent
    for folder in reversed(missing):
        with contextlib.suppress(FileExistsError):
            folder.mkdir(mode=DIR_MODE)
        os.chmod(folder, DIR_MODE)  # mkdir's mode is filtered by the umask
    if (os.stat(path).st_mode & 0o777) != DIR_MODE:
        os.chmod(path, DIR_MODE)
    return path


def ensure_private_file(path: Path) -> Path:
    """Create an empty 0600 file if missing; tighten an existing one."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)
    finally:
        os.close(fd)
    return path


def atomic_write(path: Path, data: bytes, *, locked: bool = False) -> None:
    """Replace `path` with `data`: a 0600 temporary file, fsync, rename, fsync the folder.

    `locked`: the caller holds an exclusive lock on the folder (which exists, private), so a
    fixed temporary name is safe and the folder need not be checked again.
    """
    folder = os.path.dirname(path)
    if not locked:
        ensure_private_dir(Path(folder))
    dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        write_at(dir_fd, os.path.basename(path), data, locked=locked)
    finally:
        os.close(dir_fd)


def open_private_dir(base: Path, parts: Sequence[str], *, create: bool = True) -> int | None:
    """A descriptor of the folder `base/parts...`, reached without following a link below
    `base` (which is the user's to place anywhere: it is followed), every part 0700.

    With `create`, missing folders are made; without it, None when one is missing. A part
    that is a symbolic link or not a folder is `LinkRefused`. The caller closes the descriptor.
    """
    if create:
        ensure_private_dir(base)
    try:
        fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        if create:
            raise
        return None
    where = base
    try:
        for part in parts:
            where = where / part
            try:
                child = _open_dir_at(fd, part, where)
            except FileNotFoundError:
                if not create:
                    os.close(fd)
                    return None
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, DIR_MODE, dir_fd=fd)
                child = _open_dir_at(fd, part, where)
            os.close(fd)
            fd = child
            if stat.S_IMODE(os.fstat(fd).st_mode) != DIR_MODE:
                os.fchmod(fd, DIR_MODE)  # mkdir's mode is filtered by the umask
    except BaseException:
        os.close(fd)
        raise
    return fd


def _open_dir_at(dir_fd: int, name: str, where: Path) -> int:
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in _REFUSED:
            raise LinkRefused(where) from None
        raise


def open_file_at(
    dir_fd: int, name: str, flags: int, *, where: Path | str, single: bool = False
) -> int:
    """Open (creating it 0600 with O_CREAT) the plain file `name` in the folder `dir_fd`,
    never through a link: a link, or anything but a plain file, is `LinkRefused`. `single`:
    a file that is written in place must have no other name (a hard link) either."""
    try:
        fd = os.open(
            name, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, FILE_MODE, dir_fd=dir_fd
        )
    except OSError as exc:
        if exc.errno in _REFUSED:
            raise LinkRefused(where, "a symbolic link or not a plain file") from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or (single and info.st_nlink > 1):
            raise LinkRefused(where, "not a plain file of its own (a link or something else)")
        if stat.S_IMODE(info.st_mode) != FILE_MODE:
            os.fchmod(fd, FILE_MODE)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_lock(dir_fd: int, where: Path) -> int:
    """The lock file `where` (by its name, in the folder `dir_fd`) opened for `exclusive`:
    made 0600 if missing, never through a link, and with no other name (a hard link) either:
    a store may keep a counter in it, written in place."""
    return open_file_at(dir_fd, where.name, os.O_RDWR | os.O_CREAT, where=where, single=True)


@contextlib.contextmanager
def exclusive(lock_fd: int) -> Iterator[int]:
    """An exclusive `flock` on `lock_fd` (from `open_lock`), waited for and held for the block:
    how a store's writers take turns across threads and processes. The descriptor is closed
    after, whatever happens."""
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX)
        yield lock_fd
    finally:
        fcntl.flock(lock_fd, fcntl.LOCK_UN)
        os.close(lock_fd)


def _temporary(dir_fd: int, tmp: str, data: bytes, *, sync: bool) -> None:
    """Write the new 0600 file `tmp` (one left by a crash is replaced, never written
    through), fsynced with `sync`; removed again on an error."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp, dir_fd=dir_fd)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(tmp, flags, FILE_MODE, dir_fd=dir_fd)
    try:
        os.fchmod(fd, FILE_MODE)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if sync:
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise
    os.close(fd)


def write_at(dir_fd: int, name: str, data: bytes, *, locked: bool = False) -> os.stat_result:
    """Replace `name` in the folder `dir_fd` with `data` atomically (a 0600 temporary file,
    fsync, rename, fsync the folder); the new file's stat.

    `locked`: the caller holds an exclusive lock on the folder, so a fixed temporary name is
    safe (one left by a crash is replaced, never written through).
    """
    tmp = f".{name}.tmp" if locked else f".{name}.{os.urandom(6).hex()}.tmp"
    _temporary(dir_fd, tmp, data, sync=True)
    try:
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise
    os.fsync(dir_fd)
    return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)


class Batch:
    """Many atomic replacements (each as `write_at` makes one: a 0600 temporary file renamed
    over the name), made durable together: every temporary file's data is flushed before any
    is renamed into place, and the names once after all renames. Where the system has
    `syncfs(2)` (Linux) each of the two flushes is one call for the whole file system, not
    an fsync per file and per folder, which is what makes a pull of thousands of notes fast;
    elsewhere each file and each folder is fsynced. The caller holds an exclusive lock on each
    folder until `commit` returns (the temporary names are fixed, as with `locked`)."""

    def __init__(self) -> None:
        self._staged: list[tuple[int, str, str]] = []
        self._each = _syncfs is None

    def stage(self, dir_fd: int, name: str, data: bytes) -> None:
        tmp = f".{name}.tmp"
        _temporary(dir_fd, tmp, data, sync=self._each)
        self._staged.append((dir_fd, tmp, name))

    def commit(self) -> list[os.stat_result]:
        """Rename every staged file into place, durably; each new file's stat, in order.
        On an error the files not yet renamed are removed, and it is raised."""
        staged, self._staged = self._staged, []
        done = 0
        try:
            if staged and not self._each:
                _flush(staged[0][0])
            for dir_fd, tmp, name in staged:
                os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
                done += 1
            if staged and not self._each:
                _flush(staged[0][0])
            elif staged:
                for dir_fd in dict.fromkeys(fd for fd, _, _ in staged):
                    os.fsync(dir_fd)
        except BaseException:
            for dir_fd, tmp, _ in staged[done:]:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=dir_fd)
            raise
        return [os.stat(name, dir_fd=fd, follow_symlinks=False) for fd, _, name in staged]


def _load_syncfs() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        found: Callable[[int], int] = ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError):
        return None
    return found


_syncfs = _load_syncfs()


def _flush(fd: int) -> None:
    """Everything written to the file system of `fd` durable (syncfs(2))."""
    assert _syncfs is not None
    if _syncfs(fd) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"syncfs: {os.strerror(code)}")


def count_marked(parent: Path, marker: str, prefix: str, *, names: str = "") -> int:
    """How many folders in `parent` (named `names...`) hold a file `marker` whose text starts
    with `prefix`, read without following a link: how a store counts its folders of a kind."""
    try:
        folders = [name for name in os.listdir(parent) if name.startswith(names)]
    except FileNotFoundError:
        return 0
    found = 0
    wanted = prefix.encode("utf-8")
    for name in folders:
        with contextlib.suppress(OSError):
            fd = os.open(parent / name / marker, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            try:
                found += os.read(fd, len(wanted)) == wanted
            finally:
                os.close(fd)
    return found
