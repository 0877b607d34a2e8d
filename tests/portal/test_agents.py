"""Agents on the portal (P4): `GET/POST /api/agents`, `GET/PATCH/DELETE /api/agents/{id}`;
another user's agent answers 404 to every verb; anonymous is a 401; a PATCH with null for a
required field is a 400 that says what to send; the home page lists the user's agents under
its own title."""

from __future__ import annotations

import re
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from webagents.portal.accounts import service as accounts
from webagents.portal.db.tables import Agent, AgentKey
from webagents.portal.tokens.credentials import digest

from .conftest import make_account, sign_in

HELPER = {
    "name": "helper",
    "description": "Answers briefly.",
    "instructions": "Be brief.",
    "model": "openai/gpt-4o-mini",
    "skills": ["memory", {"session": {"backend": "local"}}],
}


def _bearer(db: Session, username: str) -> dict[str, str]:
    scope = make_account(db, username)
    return {"Authorization": f"Bearer {accounts.create_key(db, scope, 'cli').key}"}


def test_p4_create_list_get_patch_delete_an_agent(client: TestClient, db: Session) -> None:
    alice = _bearer(db, "alice")
    created = client.post("/api/agents", headers=alice, json=HELPER)
    assert created.status_code == 201
    body = created.json()
    agent: dict[str, Any] = body["agent"]
    assert sorted(body) == ["agent", "rawApiKey"]
    assert body["rawApiKey"].startswith("rok_")
    assert agent == {
        **HELPER,
        "id": agent["id"],
        "username": "helper",
        "allowOthers": False,  # Portal Connect: the owner alone until they allow others
        "created_at": agent["created_at"],
        "updated_at": agent["updated_at"],
    }
    stored = db.scalars(select(Agent)).one()
    key = db.scalars(select(AgentKey)).one()
    assert (key.agent_id, key.name, key.key_hash, key.revoked_at) == (
        stored.id,
        "first key",  # no keyName sent: webagents publish sends the machine's name
        digest(body["rawApiKey"]),
        None,
    )

    listed = client.get("/api/agents", headers=alice)
    assert listed.json() == {"agents": [agent]}
    assert client.get(f"/api/agents/{agent['id']}", headers=alice).json() == {"agent": agent}

    patched = client.patch(
        f"/api/agents/{agent['id']}", headers=alice, json={"instructions": "Be kind."}
    )
    assert patched.status_code == 200
    assert patched.json()["agent"] == {
        **agent,
        "instructions": "Be kind.",
        "updated_at": patched.json()["agent"]["updated_at"],
    }
    deleted = client.delete(f"/api/agents/{agent['id']}", headers=alice)
    assert deleted.json() == {"deleted": True}
    assert client.get("/api/agents", headers=alice).json() == {"agents": []}


def test_p4_another_users_agent_answers_404_to_every_verb(client: TestClient, db: Session) -> None:
    alice, bob = _bearer(db, "alice"), _bearer(db, "bob")
    agent_id = client.post("/api/agents", headers=alice, json=HELPER).json()["agent"]["id"]
    refusal = {
        "error": {
            "message": "you have no such agent on this portal: publish it (webagents publish), "
            "or see your agents with GET /api/agents",
            "type": "not_found_error",
            "param": None,
            "code": "not_found",
        }
    }
    for method, extra in [("GET", {}), ("PATCH", {"json": {"name": "mine"}}), ("DELETE", {})]:
        answer = client.request(method, f"/api/agents/{agent_id}", headers=bob, **extra)
        assert (answer.status_code, answer.json()) == (404, refusal), method
    assert client.get("/api/agents", headers=bob).json() == {"agents": []}
    kept = db.scalars(select(Agent)).one()
    assert (kept.name, kept.instructions) == ("helper", "Be brief.")


def test_p4_agents_refuse_anonymous_and_bad_input(client: TestClient, db: Session) -> None:
    for method, path in [("GET", "/api/agents"), ("POST", "/api/agents"), ("GET", "/api/agents/x")]:
        assert client.request(method, path, json=HELPER).status_code == 401
    alice, bob = _bearer(db, "alice"), _bearer(db, "bob")
    assert client.post("/api/agents", headers=alice, json=HELPER).status_code == 201
    taken = client.post("/api/agents", headers=bob, json=HELPER)
    assert (taken.status_code, taken.json()["error"]["message"]) == (
        409,
        "the agent name 'helper' is taken on this portal (by another account's agent, or kept "
        "for the account that gave it up lately): choose another name: in its AGENT.md",
    )
    bad = client.post("/api/agents", headers=bob, json={**HELPER, "name": "My Helper"})
    assert (bad.status_code, bad.json()["error"]["message"]) == (
        400,
        "an agent's name on the portal is 2-64 characters of a-z 0-9 _ -, starting with a "
        "letter or digit, not 'My Helper': set name: in its AGENT.md",
    )
    unknown = client.post("/api/agents", headers=bob, json={**HELPER, "name": "x2", "color": 1})
    assert unknown.status_code == 400


def test_p4_the_home_page_lists_the_users_agents_only(client: TestClient, db: Session) -> None:
    alice, bob = _bearer(db, "alice"), _bearer(db, "bob")
    made = client.post("/api/agents", headers=alice, json=HELPER).json()["agent"]["id"]
    client.post("/api/agents", headers=bob, json={**HELPER, "name": "bobs-agent"})
    sign_in(client, "alice")
    page = client.get("/").text
    assert (
        f'<li><article><strong><a href="/agents/{made}">helper</a></strong><br>'
        '<span class="muted">Answers briefly.</span>\n'
        f'    <br><a href="/agents/{made}/chats">chats</a> · <a href="/agents/{made}/memory">'
        "memory</a></article></li>"
    ) in page
    assert "bobs-agent" not in page


def test_p4_a_token_for_an_agent_names_the_owner_or_a_user(client: TestClient, db: Session) -> None:
    alice, bob = _bearer(db, "alice"), _bearer(db, "bob")
    agent_id = client.post("/api/agents", headers=alice, json=HELPER).json()["agent"]["id"]
    not_yet = client.post("/api/agents/token", headers=bob, json={"agent": "helper"})
    assert (not_yet.status_code, not_yet.json()["error"]["code"]) == (403, "not_allowed")
    client.patch(f"/api/agents/{agent_id}", headers=alice, json={"allowOthers": True})
    for headers, tier in [(alice, "owner"), (bob, "user")]:
        answer = client.post("/api/agents/token", headers=headers, json={"agent": "helper"})
        body = answer.json()
        assert body == {
            "access_token": body["access_token"],
            "agent_id": agent_id,
            "agent_name": "helper",
            "tier": tier,
            "expires_in": 900,
        }
    missing = client.post("/api/agents/token", headers=bob, json={"agent": "nobody"})
    assert (missing.status_code, missing.json()["error"]["message"]) == (
        404,
        "there is no agent 'nobody' on this portal",
    )


@pytest.mark.parametrize(
    ("field", "what"),
    [
        ("name", "a name"),
        ("description", 'a string ("" for none)'),
        ("instructions", 'a string ("" for none)'),
        ("skills", "a list or a mapping ([] or {} for none)"),
    ],
)
def test_p4_patch_with_null_for_a_required_field_is_a_400_saying_what_to_send(
    client: TestClient, db: Session, field: str, what: str
) -> None:
    scope = make_account(db)
    bearer = {"Authorization": f"Bearer {accounts.create_key(db, scope, 'cli').key}"}
    created = client.post(
        "/api/agents",
        headers=bearer,
        json={"name": "helper", "description": "d", "instructions": "i", "skills": ["memory"]},
    ).json()["agent"]
    answer = client.patch(f"/api/agents/{created['id']}", headers=bearer, json={field: None})
    assert (answer.status_code, answer.json()) == (
        400,
        {
            "error": {
                "message": f"{field} cannot be null: send {what}, or leave {field} out to keep "
                "it as it is",
                "type": "invalid_request_error",
                "param": None,
                "code": "null_field",
            }
        },
    )
    unchanged = client.get(f"/api/agents/{created['id']}", headers=bearer).json()["agent"]
    assert unchanged == created
    cleared = client.patch(f"/api/agents/{created['id']}", headers=bearer, json={"model": None})
    assert (cleared.status_code, cleared.json()["agent"]["model"]) == (200, None)


def test_p4_the_home_pages_title_is_only_the_title(client: TestClient, db: Session) -> None:
    make_account(db)
    sign_in(client)
    page = client.get("/").text
    assert re.findall(r"<title>(.*?)</title>", page, re.S) == ["alice · webagents portal"]
    assert page.count("<h2>Your agents</h2>") == 1
