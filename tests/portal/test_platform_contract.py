"""The portal's HTTP contract as the platform's SDK uses it (SPEC section 7, P2-P5, P9, P12):
every request sent in exactly the shapes SPEC gives, as raw HTTP (httpx against the app: no
client of ours), and every answer's status, content type, keys and their types checked
whole, on SQLite and PostgreSQL. The skills mapping of P4 and the string cursor of P5 go
round trip."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from webagents.portal.accounts import service as accounts
from webagents.portal.admin import open_database
from webagents.portal.db.engine import make_sessions
from webagents.portal.settings import PortalSettings

from .conftest import make_account
from .processes import Served

JSON = "application/json"
MEMORY = "/api/storage/memory-scoped"
SKILLS = {"memory": {"portal": True}, "openai": {}}
ENTRY = {
    "id": str,
    "namespace": str,
    "key": str,
    "content": str,
    "description": str,
    "source": str,
    "created_at": str,
    "updated_at": str,
    "content_sha256": str,
}
LINE = {
    "op": str,
    "id": str,
    "namespace": str,
    "key": str,
    "content": str,
    "description": str,
    "source": str,
    "at": str,
    "content_sha256": str,
    "cursor": str,
}
AGENT = {
    "id": str,
    "username": str,
    "name": str,
    "description": str,
    "instructions": str,
    "model": str,
    "skills": {"memory": {"portal": bool}, "openai": {}},
    "allowOthers": bool,
    "created_at": str,
    "updated_at": str,
}
ERROR = {"error": {"message": str, "type": str, "param": type(None), "code": str}}


def shape(value: Any) -> Any:
    """A JSON value's shape: objects by key, a list by its items' shapes, else the type."""
    if isinstance(value, dict):
        return {key: shape(item) for key, item in value.items()}
    if isinstance(value, list):
        return [shape(item) for item in value]
    return type(value)


def answered(answer: httpx.Response) -> tuple[int, str, Any]:
    """(status, content type without parameters, the body's shape)."""
    kind = answer.headers.get("content-type", "").partition(";")[0]
    return answer.status_code, kind, shape(answer.json())


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_p2_p3_p4_keys_sign_in_and_agents_in_the_platforms_shapes(
    client: TestClient, db: Session
) -> None:
    scope = make_account(db, "alice")
    key = accounts.create_key(db, scope, "sdk").key
    db.commit()

    token = client.post("/api/auth/cli/token", headers=bearer(key), json={})
    assert answered(token) == (200, JSON, {"access_token": str, "username": str, "user_id": str})
    access = token.json()["access_token"]
    # The keys that sign tokens, published once one was signed.
    jwks = client.get("/.well-known/jwks.json")
    assert answered(jwks) == (
        200,
        JSON,
        {"keys": [{"kty": str, "n": str, "e": str, "kid": str, "alg": str, "use": str}]},
    )

    me = client.get("/api/users/me", headers=bearer(access))
    assert answered(me) == (200, JSON, {"user": {"id": str, "username": str, "created_at": str}})
    assert me.json()["user"]["username"] == "alice"

    created = client.post(
        "/api/agents",
        headers=bearer(access),
        json={
            "name": "notekeeper",
            "description": "Keeps notes.",
            "instructions": "Keep notes.",
            "model": "openai/gpt-4o-mini",
            "skills": SKILLS,
        },
    )
    assert answered(created) == (201, JSON, {"agent": AGENT, "rawApiKey": str})
    agent = created.json()["agent"]
    assert (agent["username"], agent["skills"]) == ("notekeeper", SKILLS)

    patched = client.patch(
        f"/api/agents/{agent['id']}",
        headers=bearer(access),
        json={"description": "Keeps notes well.", "skills": {"memory": {"portal": True}}},
    )
    assert answered(patched) == (
        200,
        JSON,
        {"agent": {**AGENT, "skills": {"memory": {"portal": bool}}}},
    )
    assert patched.json()["agent"]["skills"] == {"memory": {"portal": True}}
    listed = client.get("/api/agents", headers=bearer(access))
    assert answered(listed) == (
        200,
        JSON,
        {"agents": [{**AGENT, "skills": {"memory": {"portal": bool}}}]},
    )

    called = client.post("/api/agents/token", headers=bearer(access), json={"agent": "notekeeper"})
    assert answered(called) == (
        200,
        JSON,
        {"access_token": str, "agent_id": str, "agent_name": str, "tier": str, "expires_in": int},
    )

    device = client.post("/api/auth/device/code")
    assert answered(device) == (
        200,
        JSON,
        {
            "device_code": str,
            "user_code": str,
            "verification_uri": str,
            "verification_uri_complete": str,
            "expires_in": int,
            "interval": int,
        },
    )
    pending = client.post(
        "/api/auth/device/token",
        data={
            "grant_type": "urn:ietf:params:oauth:grant-type:device_code",
            "device_code": device.json()["device_code"],
        },
    )
    assert answered(pending) == (400, JSON, {"error": str, "error_description": str})
    assert pending.json()["error"] == "authorization_pending"

    out = client.post("/api/auth/cli/logout", headers=bearer(access))
    assert answered(out) == (200, JSON, {"revoked": bool})
    assert answered(client.get("/api/users/me", headers=bearer(access))) == (401, JSON, ERROR)


def _agent_key(client: TestClient, db: Session) -> tuple[str, str, str]:
    """(the user's key, the agent's id, the agent's key) of a published agent."""
    scope = make_account(db, "alice")
    key = accounts.create_key(db, scope, "sdk").key
    db.commit()
    created = client.post(
        "/api/agents", headers=bearer(key), json={"name": "notekeeper", "skills": SKILLS}
    ).json()
    return key, created["agent"]["id"], created["rawApiKey"]


def test_p5_the_memory_store_in_the_platforms_shapes_with_a_string_cursor(
    client: TestClient, db: Session
) -> None:
    _, agent_id, agent_key = _agent_key(client, db)
    me = bearer(agent_key)

    put = client.put(
        MEMORY,
        headers=me,
        json={
            "agentId": agent_id,
            "namespace": "owner",
            "key": "plan",
            "content": "Launch on Monday.",
            "description": "the launch plan",
            "source": "sdk",
            "at": None,
        },
    )
    assert answered(put) == (200, JSON, {"entry": ENTRY})
    at = client.put(
        MEMORY,
        headers=me,
        params={"agentId": agent_id},
        json={
            "namespace": "shared",
            "key": "faq",
            "content": "Ask anything.",
            "description": "",
            "source": "sdk",
            "at": "2026-01-31T12:00:00Z",
        },
    )
    assert answered(at) == (200, JSON, {"entry": ENTRY})
    assert at.json()["entry"]["updated_at"] == "2026-01-31T12:00:00Z"

    got = client.get(
        MEMORY, headers=me, params={"action": "get", "namespace": "owner", "key": "plan"}
    )
    assert answered(got) == (200, JSON, {"entry": ENTRY})
    missing = client.get(
        MEMORY, headers=me, params={"action": "get", "namespace": "owner", "key": "none"}
    )
    assert (answered(missing), missing.json()) == (
        (200, JSON, {"entry": type(None)}),
        {"entry": None},
    )

    listed = client.get(
        MEMORY,
        headers=me,
        params=[
            ("action", "list"),
            ("namespace", "owner"),
            ("namespace", "shared"),
            ("limit", "10"),
            ("prefix", "p"),
            ("excludeSource", "web"),
        ],
    )
    assert answered(listed) == (200, JSON, {"entries": [ENTRY]})
    found = client.get(
        MEMORY,
        headers=me,
        params=[("action", "search"), ("q", "launch"), ("namespace", "owner"), ("limit", "5")],
    )
    assert answered(found) == (
        200,
        JSON,
        {"entries": [{**ENTRY, "matched": [str]}], "semantic": str},
    )

    first = client.get(MEMORY, headers=me, params={"action": "sync", "namespace": "owner"})
    assert answered(first) == (200, JSON, {"lines": [LINE], "cursor": str, "more": bool})
    cursor = first.json()["cursor"]
    again = client.get(
        MEMORY, headers=me, params={"action": "sync", "namespace": "owner", "since": cursor}
    )
    assert again.json() == {"lines": [], "cursor": cursor, "more": False}

    pushed = client.post(
        MEMORY,
        headers=me,
        params={"action": "sync"},
        json={
            "namespace": "owner",
            "lines": [
                {
                    "op": "put",
                    "id": first.json()["lines"][0]["id"],
                    "namespace": "owner",
                    "key": "plan",
                    "content": "Launch on Tuesday.",
                    "description": "the launch plan",
                    "source": "sdk",
                    "at": "2026-02-01T09:00:00Z",
                },
                {
                    "op": "delete",
                    "id": None,
                    "namespace": "owner",
                    "key": "gone",
                    "content": None,
                    "description": None,
                    "source": "sdk",
                    "at": "2026-02-01T09:00:01Z",
                },
            ],
        },
    )
    assert (answered(pushed), pushed.json()) == ((200, JSON, {"applied": int}), {"applied": 2})
    after = client.get(
        MEMORY, headers=me, params={"action": "sync", "namespace": "owner", "since": cursor}
    )
    assert answered(after) == (200, JSON, {"lines": [LINE], "cursor": str, "more": bool})
    assert after.json()["lines"][0]["content"] == "Launch on Tuesday."
    assert after.json()["cursor"] != cursor

    forgot = client.delete(MEMORY, headers=me, params={"namespace": "owner", "key": "plan"})
    assert (answered(forgot), forgot.json()) == (
        (200, JSON, {"forgotten": bool}),
        {"forgotten": True},
    )
    tomb = client.get(
        MEMORY,
        headers=me,
        params={"action": "sync", "namespace": "owner", "since": after.json()["cursor"]},
    )
    assert answered(tomb) == (
        200,
        JSON,
        {
            "lines": [
                {
                    **LINE,
                    "content": type(None),
                    "description": type(None),
                    "content_sha256": type(None),
                }
            ],
            "cursor": str,
            "more": bool,
        },
    )
    bad = client.get(MEMORY, headers=me, params={"action": "sync", "since": "not-a-cursor"})
    assert answered(bad) == (400, JSON, ERROR)


def test_p9_chats_in_the_platforms_shapes(client: TestClient, db: Session) -> None:
    key, agent_id, _ = _agent_key(client, db)
    user = bearer(key)
    recorded = client.post(
        f"/api/agents/{agent_id}/conversations",
        headers=user,
        json={
            "sessionId": "launch-plan",
            "messages": [
                {"role": "user", "content": "Plan the launch."},
                {"role": "assistant", "content": "Monday."},
            ],
        },
    )
    assert answered(recorded) == (200, JSON, {"chatId": str})
    chat_id = recorded.json()["chatId"]
    more = client.post(
        f"/api/agents/{agent_id}/conversations",
        headers=user,
        json={
            "sessionId": "launch-plan",
            "messages": [{"role": "user", "content": "Why?"}],
            "chatId": chat_id,
        },
    )
    assert (answered(more), more.json()) == ((200, JSON, {"chatId": str}), {"chatId": chat_id})
    chats = client.get(f"/api/agents/{agent_id}/conversations", headers=user, params={"limit": 10})
    assert answered(chats) == (
        200,
        JSON,
        {
            "conversations": [
                {
                    "chatId": str,
                    "sessionId": str,
                    "updatedAt": str,
                    "messageCount": int,
                    "preview": str,
                }
            ]
        },
    )
    messages = client.get(f"/api/agents/{agent_id}/conversations/{chat_id}", headers=user)
    status, kind, body = answered(messages)
    assert (status, kind, sorted(body)) == (200, JSON, ["messages"])
    assert [(m["role"], m["content"]) for m in messages.json()["messages"]] == [
        ("user", "Plan the launch."),
        ("assistant", "Monday."),
        ("user", "Why?"),
    ]


@pytest.mark.e2e  # runs the installed webagents command
def test_p12_the_public_endpoint_answers_openais_error_shape_for_an_agent_offline(
    served: Served, fresh_database_url: str
) -> None:
    """Against a real `webagents portal serve` (the relay opens sessions of its own)."""
    engine = open_database(PortalSettings(database_url=fresh_database_url))
    try:
        with make_sessions(engine)() as session, session.begin():
            key = accounts.create_key(session, make_account(session, "alice"), "sdk").key
    finally:
        engine.dispose()
    with httpx.Client(base_url=served.url, headers=bearer(key)) as http:
        created = http.post("/api/agents", json={"name": "notekeeper", "skills": SKILLS})
        assert answered(created) == (
            201,
            JSON,
            {"agent": {**AGENT, "model": type(None), "description": str}, "rawApiKey": str},
        )
        offline = http.post(
            "/agents/notekeeper/chat/completions",
            json={"model": "openai/gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]},
        )
    assert answered(offline) == (503, JSON, ERROR)
    assert offline.json()["error"]["code"] == "agent_offline"
