"""Reading a memory export back in tests."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path


def _unzip(data: bytes, into: Path) -> None:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        for info in archive.infolist():
            target = into / info.filename
            mode = (info.external_attr >> 16) & 0o777
            if info.is_dir():
                target.mkdir(parents=True, exist_ok=True)
                target.chmod(mode)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(archive.read(info))
                target.chmod(mode)
