"""Private files: folders 0700 and files 0600 whatever the umask, written atomically.

Everything webagents keeps about people (notes, conversations, what was typed in the chat)
goes through here.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

DIR_MODE = 0o700
FILE_MODE = 0o600


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
    if locked:
        tmp = os.path.join(folder, f".{os.path.basename(path)}.tmp")
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(tmp, flags, FILE_MODE)
    else:
        ensure_private_dir(Path(folder))
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    try:
        os.fchmod(fd, FILE_MODE)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
        os.close(fd)
        fd = -1
        os.replace(tmp, path)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    dir_fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
