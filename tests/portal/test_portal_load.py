"""The portal under many clients at once, with real `webagents portal serve` processes on
SQLite and PostgreSQL (issue 21, "Many clients at once"): every answer is a 2xx or a 503/429
with Retry-After, no connection is dropped, every acknowledged write is kept; a low bound on
the requests working on the database shows its 503 (db/gate.py)."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import httpx
import pytest

from .load_helpers import MEMORY, ONE_SLOT, busy, gate_held, publish
from .processes import Served

pytestmark = pytest.mark.e2e

CLIENTS = 64
ROUNDS = 2
ALLOWED = {"2xx", "503 with Retry-After", "429 with Retry-After"}


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
    user_key, agent_key, agent_id = publish(tmp_path, served, fresh_database_url)

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


def test_p_a_low_database_bound_answers_503_with_retry_after_at_once(
    tmp_path: Path, fresh_database_url: str
) -> None:
    """`--max-db-requests 1 --max-db-waiting 0`: while one request works on the database (a
    put held by another process's lock), the next is answered 503 with Retry-After at once
    (JSON, saying what to do); the held one is answered 200 once the lock is gone, and the
    next request is served again."""
    served = Served(tmp_path, "--database", fresh_database_url, *ONE_SLOT)
    try:
        assert (
            "  database requests: 1 at once, 0 more waiting (1 s at most); beyond, 503 with "
            "Retry-After\n" in served.output
        )
        user_key, agent_key, _ = publish(tmp_path, served, fresh_database_url)
        agent = {"Authorization": f"Bearer {agent_key}"}
        me = {"Authorization": f"Bearer {user_key}"}
        with httpx.Client(base_url=served.url, timeout=120) as http:
            with gate_held(http, fresh_database_url, agent_key) as held:
                pass
            refused, put = held.refused, held.put
            assert refused is not None
            assert (refused.status_code, refused.headers.get("retry-after"), refused.json()) == (
                503,
                "1",
                busy(0, 1),
            )
            codes = [answer.json()["error"]["code"] for answer in put[:-1]]
            assert (codes, put[-1].status_code) == (["server_busy"] * len(codes), 200)
            assert http.get("/api/users/me", headers=me).status_code == 200
            kept = http.get(
                MEMORY, headers=agent, params={"action": "get", "namespace": "shared", "key": "k"}
            )
            assert kept.json()["entry"]["content"] == "kept"
    finally:
        served.stop()
