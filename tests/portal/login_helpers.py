"""The command line's sign-in file and the `webagents` command against a served portal."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.e2e.conftest import child_env, webagents_command


def webagents(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [webagents_command(), *args],
        env=child_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _login_file(tmp_path: Path) -> Path:
    return tmp_path / "home" / ".webagents" / "login.json"
