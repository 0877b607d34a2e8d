"""A signed-in `webagents` command against a served portal, for publishing agents."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.e2e.conftest import child_env, webagents_command

from .account_helpers import new_user_key
from .processes import Served


def webagents(tmp_path: Path, *args: str, home: str = "home") -> subprocess.CompletedProcess[str]:
    env = child_env(tmp_path)
    env["WEBAGENTS_HOME"] = str(tmp_path / home / ".webagents")
    return subprocess.run(
        [webagents_command(), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _signed_in(tmp_path: Path, served: Served, database: str, username: str, home: str) -> str:
    key = new_user_key(database, username)
    done = webagents(tmp_path, "login", "--portal", served.url, "--token", key, home=home)
    assert done.returncode == 0, done.stderr
    return key
