"""What the load and refusal tests of real `portal serve` processes share: a published agent,
and a database gate held full (one slot, no queue) by a put that waits for another
process's lock (test_portal_load.py, test_refusal_served.py)."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psycopg
from sqlalchemy.engine import make_url

from .conftest import PASSWORD
from .processes import Served, portal

MEMORY = "/api/storage/memory-scoped"
# The `portal serve` options of a gate that one request fills.
ONE_SLOT = ("--max-db-requests", "1", "--max-db-waiting", "0")


def busy(waiting: int, seconds: int) -> dict[str, object]:
    """The body of the gate's 503 to a request that arrived with `waiting` others waiting."""
    return {
        "error": {
            "message": f"the portal is busy: {waiting} requests already wait for the database; "
            f"try again in {seconds} s",
            "type": "server_error",
            "param": None,
            "code": "server_busy",
        }
    }


def publish(tmp_path: Path, served: Served, database: str) -> tuple[str, str, str]:
    """A user's API key, and the key and id of an agent the user published."""
    assert (
        portal(tmp_path, "adduser", "alice", "--database", database, stdin=PASSWORD).returncode == 0
    )
    user_key = portal(tmp_path, "apikey", "alice", "--database", database).stdout.splitlines()[-1]
    made = httpx.post(
        f"{served.url}/api/agents",
        headers={"Authorization": f"Bearer {user_key}"},
        json={"name": "helper"},
        timeout=60,
    )
    assert made.status_code == 201, made.text
    return user_key, made.json()["rawApiKey"], made.json()["agent"]["id"]


@contextmanager
def database_held(database: str) -> Iterator[None]:
    """The memory store's table locked against writers (SQLite: the write lock; PostgreSQL:
    the table) until the block ends, as a long transaction of another process would."""
    url = make_url(database)
    if url.get_backend_name() == "sqlite":
        held = sqlite3.connect(url.database or "", isolation_level=None)
        held.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            held.execute("ROLLBACK")
            held.close()
        return
    with psycopg.connect(
        url.set(drivername="postgresql").render_as_string(hide_password=False)
    ) as conn:
        conn.execute("LOCK TABLE memory_entries IN EXCLUSIVE MODE")
        yield
        conn.rollback()


@dataclass
class HeldGate:
    """`refused`: the first get refused while the put held the one slot; `put`: the put's
    answers (503s while a probe had the slot, then, once the block ended, its own)."""

    refused: httpx.Response | None = None
    put: list[httpx.Response] = field(default_factory=list)


@contextmanager
def gate_held(http: httpx.Client, database: str, agent_key: str) -> Iterator[HeldGate]:
    """The one slot of a `ONE_SLOT` portal taken, for the block, by a note put (key "k",
    content "kept" in the shared namespace) that waits inside for `database_held`'s lock;
    on leaving, the lock is gone and the put finished."""
    agent = {"Authorization": f"Bearer {agent_key}"}
    held = HeldGate()
    with database_held(database):

        def write() -> None:
            # Sent again while a probe has the one slot (it is refused then too), until it
            # gets the slot and waits for the lock inside (a bounded loop).
            for _ in range(400):
                held.put.append(
                    http.put(
                        MEMORY,
                        headers=agent,
                        json={"namespace": "shared", "key": "k", "content": "kept"},
                    )
                )
                if held.put[-1].status_code != 503:
                    return
                time.sleep(0.01)

        writer = threading.Thread(target=write)
        writer.start()
        probe = {"action": "get", "namespace": "shared", "key": "other"}
        for _ in range(1200):  # until the held put has the one slot (a bounded poll)
            # A read: it needs no write lock, so the held lock cannot hold it too.
            answer = http.get(MEMORY, headers=agent, params=probe)
            if answer.status_code != 200:
                held.refused = answer
                break
            time.sleep(0.05)
        assert held.refused is not None, f"the held put never took the one slot: {held.put}"
        yield held
    writer.join(timeout=120)
