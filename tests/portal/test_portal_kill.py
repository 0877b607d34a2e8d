"""The attack's figure kept (issue 21): `kill -9` of a real `webagents portal serve` during a
burst of writes loses no write it acknowledged, on SQLite and PostgreSQL."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import pytest

from .conftest import PASSWORD
from .processes import Served, portal

pytestmark = pytest.mark.e2e

MEMORY = "/api/storage/memory-scoped"
WRITERS = 8
BEFORE_KILL = 80  # acknowledged writes before the kill, so that it lands inside the burst


def test_p6_kill_9_of_the_portal_during_a_write_burst_loses_no_acknowledged_write(
    tmp_path: Path, fresh_database_url: str
) -> None:
    database = ("--database", fresh_database_url)
    assert portal(tmp_path, "adduser", "alice", *database, stdin=PASSWORD).returncode == 0
    user_key = portal(tmp_path, "apikey", "alice", *database).stdout.splitlines()[-1]
    first = Served(tmp_path, *database)
    try:
        made = httpx.post(
            f"{first.url}/api/agents",
            headers={"Authorization": f"Bearer {user_key}"},
            json={"name": "helper"},
            timeout=60,
        )
        agent = {"Authorization": f"Bearer {made.json()['rawApiKey']}"}
        acknowledged: dict[str, str] = {}
        lock = threading.Lock()

        def burst(writer: int) -> None:
            with httpx.Client(base_url=first.url, timeout=60) as http:
                for n in range(100_000):
                    key, content = f"w{writer}-{n}", f"written by {writer} as number {n}"
                    try:
                        answer = http.put(
                            MEMORY,
                            headers=agent,
                            json={"namespace": "shared", "key": key, "content": content},
                        )
                    except httpx.TransportError:
                        return  # the portal is gone: this one was not acknowledged
                    if answer.status_code == 200:
                        with lock:
                            acknowledged[key] = content

        writers = [threading.Thread(target=burst, args=(n,)) for n in range(WRITERS)]
        for thread in writers:
            thread.start()
        for _ in range(2400):  # until enough are acknowledged (a bounded poll)
            if len(acknowledged) >= BEFORE_KILL:
                break
            time.sleep(0.05)
        first.popen.kill()  # SIGKILL: no clean shutdown, the burst still going
        for thread in writers:
            thread.join(timeout=120)
    finally:
        first.stop()
    assert len(acknowledged) >= BEFORE_KILL

    second = Served(tmp_path, *database)
    try:
        with httpx.Client(base_url=second.url, timeout=60) as http:
            kept = {}
            for key in acknowledged:
                answer = http.get(
                    MEMORY,
                    headers=agent,
                    params={"action": "get", "namespace": "shared", "key": key},
                )
                assert answer.status_code == 200, answer.text
                entry = answer.json()["entry"]
                kept[key] = entry["content"] if entry is not None else None
    finally:
        second.stop()
    assert kept == acknowledged
