"""Private files: folders 0700 and files 0600 whatever the umask, written atomically.

Everything webagents keeps about people (notes, conversations, what was typed in the chat)
goes through here. The stores of notes and conversations write relative to a folder opened
without following links (`open_private_dir`, `write_at`, `open_file_at`): a folder or file
on the way that is a symbolic link could lead one caller's write into another's place, so it
is refused (`LinkRefused`), never written through, as the readers refuse to read through it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Sequence
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


def write_at(dir_fd: int, name: str, data: bytes, *, locked: bool = False) -> os.stat_result:
    """Replace `name` in the folder `dir_fd` with `data` atomically (a 0600 temporary file,
    fsync, rename, fsync the folder); the new file's stat.

    `locked`: the caller holds an exclusive lock on the folder, so a fixed temporary name is
    safe (one left by a crash is replaced, never written through).
    """
    if locked:
        tmp = f".{name}.tmp"
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=dir_fd)
    else:
        tmp = f".{name}.{os.urandom(6).hex()}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(tmp, flags, FILE_MODE, dir_fd=dir_fd)
    try:
        os.fchmod(fd, FILE_MODE)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
        os.close(fd)
        fd = -1
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise
    os.fsync(dir_fd)
    return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)


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
