"""The portal under many clients at once, with real `webagents portal serve` processes on
SQLite and PostgreSQL (issue 21, "Many clients at once"): every answer is a 2xx or a 503/429
with Retry-After, no connection is dropped, every acknowledged write is kept; a low bound on
the requests working on the database shows its 503 (db/gate.py)."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import psycopg
import pytest
from sqlalchemy.engine import make_url

from .conftest import PASSWORD
from .processes import Served, portal

pytestmark = pytest.mark.e2e

MEMORY = "/api/storage/memory-scoped"
CLIENTS = 64
ROUNDS = 2
ALLOWED = {"2xx", "503 with Retry-After", "429 with Retry-After"}


def _publish(tmp_path: Path, served: Served, database: str) -> tuple[str, str, str]:
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


def _outcome(answer: httpx.Response) -> str:
    if answer.is_success:
        return "2xx"
    if answer.headers.get("retry-after") and answer.status_code in (429, 503):
        return f"{answer.status_code} with Retry-After"
    return f"{answer.status_code}: {answer.text}"  # what went wrong, in the failure


async def _client(
    number: int, url: str, user_key: str, agent_key: str, agent_id: str
) -> tuple[list[str], dict[str, str]]:
    """One client's rounds of memory and chat requests: the outcome of each, and the notes
    whose put was acknowledged (key -> content)."""
    outcomes: list[str] = []
    kept: dict[str, str] = {}
    agent = {"Authorization": f"Bearer {agent_key}"}
    user = {"Authorization": f"Bearer {user_key}"}
    namespace = f"caller:client{number}"
    chats = f"/api/agents/{agent_id}/conversations"
    async with httpx.AsyncClient(base_url=url, timeout=120) as http:
        for round_ in range(ROUNDS):
            key, content = f"note-{round_}", f"client {number} round {round_}"
            requests = [
                http.put(
                    MEMORY,
                    headers=agent,
                    json={"namespace": namespace, "key": key, "content": content},
                ),
                http.get(
                    MEMORY,
                    headers=agent,
                    params={"action": "get", "namespace": namespace, "key": key},
                ),
                http.get(
                    MEMORY,
                    headers=agent,
                    params={"action": "search", "q": "round", "namespace": namespace},
                ),
                http.post(
                    chats,
                    headers=user,
                    json={
                        "sessionId": f"s{number}",
                        "messages": [{"role": "user", "content": content}],
                    },
                ),
                http.get(chats, headers=user, params={"limit": "5"}),
            ]
            for which, request in enumerate(requests):
                try:
                    answer = await request
                except httpx.TransportError as exc:
                    outcomes.append(f"dropped: {type(exc).__name__}")
                    continue
                outcomes.append(_outcome(answer))
                if which == 0 and answer.is_success:
                    kept[key] = content
    return outcomes, kept


async def _many(
    url: str, user_key: str, agent_key: str, agent_id: str
) -> list[tuple[list[str], dict[str, str]]]:
    return await asyncio.gather(
        *(_client(n, url, user_key, agent_key, agent_id) for n in range(CLIENTS))
    )


def test_p_many_clients_get_2xx_or_503_with_retry_after_and_keep_every_acknowledged_write(
    tmp_path: Path, fresh_database_url: str, served: Served
) -> None:
    """64 clients at once, each a connection of its own: no answer but 2xx or 503/429 with
    Retry-After, no dropped connection, no 500 in the log, and every acknowledged put kept."""
    user_key, agent_key, agent_id = _publish(tmp_path, served, fresh_database_url)

    results = asyncio.run(_many(served.url, user_key, agent_key, agent_id))

    outcomes = Counter(outcome for client, _ in results for outcome in client)
    assert set(outcomes) <= ALLOWED, outcomes
    assert sum(outcomes.values()) == CLIENTS * ROUNDS * 5
    assert outcomes["2xx"] > 0
    agent = {"Authorization": f"Bearer {agent_key}"}
    with httpx.Client(base_url=served.url, timeout=60) as http:
        for number, (_, kept) in enumerate(results):
            namespace = f"caller:client{number}"
            stored = {}
            for key in kept:
                answer = http.get(
                    MEMORY,
                    headers=agent,
                    params={"action": "get", "namespace": namespace, "key": key},
                )
                assert answer.status_code == 200, answer.text
                stored[key] = answer.json()["entry"]["content"]
            assert stored == kept
    assert " 500 " not in served.output
    assert "Traceback" not in served.output


@contextmanager
def _database_held(database: str) -> Iterator[None]:
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


def test_p_a_low_database_bound_answers_503_with_retry_after_at_once(
    tmp_path: Path, fresh_database_url: str
) -> None:
    """`--max-db-requests 1 --max-db-waiting 0`: while one request works on the database (a
    put held by another process's lock), the next is answered 503 with Retry-After at once
    (JSON, saying what to do); the held one is answered 200 once the lock is gone, and the
    next request is served again."""
    served = Served(
        tmp_path,
        "--database",
        fresh_database_url,
        "--max-db-requests",
        "1",
        "--max-db-waiting",
        "0",
    )
    try:
        assert (
            "  database requests: 1 at once, 0 more waiting (1 s at most); beyond, 503 with "
            "Retry-After\n" in served.output
        )
        user_key, agent_key, _ = _publish(tmp_path, served, fresh_database_url)
        agent = {"Authorization": f"Bearer {agent_key}"}
        me = {"Authorization": f"Bearer {user_key}"}
        put: list[httpx.Response] = []
        with httpx.Client(base_url=served.url, timeout=120) as http:
            with _database_held(fresh_database_url):

                def write() -> None:
                    # Sent again while a probe has the one slot (it is refused then too),
                    # until it gets the slot and waits for the lock inside (a bounded loop).
                    for _ in range(400):
                        put.append(
                            http.put(
                                MEMORY,
                                headers=agent,
                                json={"namespace": "shared", "key": "k", "content": "kept"},
                            )
                        )
                        if put[-1].status_code != 503:
                            return
                        time.sleep(0.01)

                writer = threading.Thread(target=write)
                writer.start()
                refused = None
                probe = {"action": "get", "namespace": "shared", "key": "other"}
                for _ in range(1200):  # until the held put has the one slot (a bounded poll)
                    # A read: it needs no write lock, so the held lock cannot hold it too.
                    answer = http.get(MEMORY, headers=agent, params=probe)
                    if answer.status_code != 200:
                        refused = answer
                        break
                    time.sleep(0.05)
                assert refused is not None, f"the held put never took the one slot: {put}"
            writer.join(timeout=120)
            assert (refused.status_code, refused.headers.get("retry-after"), refused.json()) == (
                503,
                "1",
                {
                    "error": {
                        "message": "the portal is busy: 0 requests already wait for the database; "
                        "try again in 1 s",
                        "type": "server_error",
                        "param": None,
                        "code": "server_busy",
                    }
                },
            )
            busy = [answer.json()["error"]["code"] for answer in put[:-1]]
            assert (busy, put[-1].status_code) == (["server_busy"] * len(busy), 200)
            assert http.get("/api/users/me", headers=me).status_code == 200
            kept = http.get(
                MEMORY, headers=agent, params={"action": "get", "namespace": "shared", "key": "k"}
            )
            assert kept.json()["entry"]["content"] == "kept"
    finally:
        served.stop()
