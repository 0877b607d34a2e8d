"""The early refusal (portal/refusal.py) in a real `webagents portal serve` on SQLite and
PostgreSQL: while its database gate is full, API requests with and without bodies are
answered 503 JSON with Retry-After on one keep-alive connection, which carries the next
request, never dropped and never a 500 (issue 21)."""

from __future__ import annotations

import json
from http.client import HTTPConnection
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from .load_helpers import MEMORY, ONE_SLOT, gate_held, publish
from .processes import Served

pytestmark = pytest.mark.e2e


def _ask(
    conn: HTTPConnection, method: str, path: str, key: str, body: object = None
) -> tuple[int, str | None, dict[str, object]]:
    headers = {"Authorization": f"Bearer {key}"}
    sent = None
    if body is not None:
        sent = json.dumps(body)
        headers["Content-Type"] = "application/json"
    conn.request(method, path, body=sent, headers=headers)
    answer = conn.getresponse()
    assert answer.getheader("connection") != "close"
    return answer.status, answer.getheader("retry-after"), json.loads(answer.read())


def test_p_full_gate_answers_503_with_retry_after_on_a_connection_it_keeps(
    tmp_path: Path, fresh_database_url: str
) -> None:
    """A note put, a chat record (both with JSON bodies) and a memory get, one after another
    on one connection while the gate's one slot is held: each 503 `server_busy` with
    Retry-After, the connection still the same; /health answers on it meanwhile, and once
    the slot is free the same connection's get is answered 200."""
    served = Served(tmp_path, "--database", fresh_database_url, *ONE_SLOT)
    try:
        user_key, agent_key, agent_id = publish(tmp_path, served, fresh_database_url)
        address = urlsplit(served.url)
        conn = HTTPConnection(address.hostname or "", address.port, timeout=60)
        conn.connect()
        sock = conn.sock
        get = f"{MEMORY}?action=get&namespace=shared&key=k"
        with httpx.Client(base_url=served.url, timeout=120) as http:
            with gate_held(http, fresh_database_url, agent_key):
                answers = [
                    _ask(
                        conn,
                        "PUT",
                        MEMORY,
                        agent_key,
                        {"namespace": "shared", "key": "other", "content": "refused"},
                    ),
                    _ask(
                        conn,
                        "POST",
                        f"/api/agents/{agent_id}/conversations",
                        user_key,
                        {"sessionId": "s1", "messages": [{"role": "user", "content": "hi"}]},
                    ),
                    _ask(conn, "GET", get, agent_key),
                ]
                health = _ask(conn, "GET", "/health", agent_key)
        for status, retry, body in answers:
            error = body["error"]
            assert isinstance(error, dict)
            assert (status, retry, error["code"], error["type"]) == (
                503,
                "1",
                "server_busy",
                "server_error",
            )
            assert "try again in 1 s" in error["message"]
        assert health == (200, None, {"status": "ok"})
        status, _, body = _ask(conn, "GET", get, agent_key)
        assert (status, body["entry"]) == (200, {**body["entry"], "content": "kept"})
        assert conn.sock is sock  # the one connection throughout
        conn.close()
        assert " 500 " not in served.output
        assert "Traceback" not in served.output
    finally:
        served.stop()
