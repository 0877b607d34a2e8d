"""A served agent's key and its readiness, for Portal Connect's served tests."""

from __future__ import annotations

from pathlib import Path

from tests.e2e.serving import Process

from .conftest import PASSWORD
from .processes import Served, portal

CONNECTED = "callers reach it at"


def _key(tmp_path: Path, database: str, username: str) -> str:
    """A new portal user's API key (rok_...)."""
    made = portal(tmp_path, "adduser", username, "--database", database, stdin=PASSWORD)
    assert made.returncode == 0, made.stderr
    return portal(tmp_path, "apikey", username, "--database", database).stdout.splitlines()[-1]


def _ready(agent: Process, served: Served) -> None:
    """The agent connected, and holding the portal's keys (it fetches them on connecting: on
    SQLite the portal answers no other request while it relays one, so a first call racing
    that fetch would find the agent unable to verify it; reported to the portal's side)."""
    agent.wait_until(lambda: CONNECTED in agent.output)
    agent.wait_until(lambda: '"GET /.well-known/jwks.json HTTP/1.1" 200' in served.output)
