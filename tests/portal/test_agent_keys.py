"""An agent's keys, one per machine (P4, issue 20), over the API and the agent's page:
`GET/POST /api/agents/{id}/keys`, `DELETE /api/agents/{id}/keys/{keyId}`. A new key works
beside the first; a revoked key is refused with the command that gives the machine a new
one while the others go on; a write notes the key's last use. Anonymous is a 401, another
account a 404 (it revokes nothing), a bad key name a 400 that says what to do."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from webagents.portal.accounts import service as accounts
from webagents.portal.db.tables import Agent, AgentKey
from webagents.portal.errors import NotFound
from webagents.portal.tokens.agent_keys import AgentKeys

from .conftest import csrf_of, make_account, sign_in

MEMORY = "/api/storage/memory-scoped"


def _bearer(db: Session, username: str) -> dict[str, str]:
    scope = make_account(db, username)
    return {"Authorization": f"Bearer {accounts.create_key(db, scope, 'cli').key}"}


def _put(client: TestClient, key: str, note: str) -> Any:
    body = {"namespace": "owner", "key": note, "content": note, "description": "", "at": None}
    return client.put(MEMORY, json=body, headers={"Authorization": f"Bearer {key}"})


def _read(client: TestClient, key: str) -> Any:
    query = {"action": "list", "namespace": "owner", "limit": "5"}
    return client.get(MEMORY, params=query, headers={"Authorization": f"Bearer {key}"})


def test_p4_agent_keys_one_per_machine_listed_with_last_use_and_revoked_one_by_one(
    client: TestClient, db: Session
) -> None:
    alice = _bearer(db, "alice")
    created = client.post(
        "/api/agents", headers=alice, json={"name": "keeper", "keyName": "laptop"}
    )
    agent_id, laptop = created.json()["agent"]["id"], created.json()["rawApiKey"]
    added = client.post(f"/api/agents/{agent_id}/keys", headers=alice, json={"name": "server"})
    assert added.status_code == 201
    made = added.json()
    server = made["rawApiKey"]
    assert made == {
        "key": {
            "id": made["key"]["id"],
            "name": "server",
            "prefix": server[:10],
            "createdAt": made["key"]["createdAt"],
            "lastUsedAt": None,
            "revokedAt": None,
        },
        "rawApiKey": server,
    }
    assert server.startswith("rok_") and server != laptop

    assert (_put(client, laptop, "a").status_code, _put(client, server, "b").status_code) == (
        200,
        200,
    )
    assert _read(client, server).status_code == 200
    listed = client.get(f"/api/agents/{agent_id}/keys", headers=alice).json()["keys"]
    assert [(k["name"], k["lastUsedAt"] is not None, k["revokedAt"]) for k in listed] == [
        ("laptop", True, None),
        ("server", True, None),
    ]

    revoked = client.delete(f"/api/agents/{agent_id}/keys/{made['key']['id']}", headers=alice)
    assert revoked.json() == {"revoked": True}
    message = (
        "this machine's key for the agent 'keeper' ('server') was revoked on the portal: run "
        "webagents publish in the agent's folder to give this machine a new key"
    )
    for refused in (_put(client, server, "c"), _read(client, server)):
        assert (refused.status_code, refused.json()["error"]) == (
            401,
            {
                "message": message,
                "type": "authentication_error",
                "param": None,
                "code": "agent_key_revoked",
            },
        )
    assert _put(client, laptop, "d").status_code == 200
    after = client.get(f"/api/agents/{agent_id}/keys", headers=alice).json()["keys"]
    assert [(k["name"], k["revokedAt"] is not None) for k in after] == [
        ("laptop", False),
        ("server", True),
    ]


def test_p4_agent_keys_refuse_anonymous_another_account_and_bad_names(
    client: TestClient, db: Session
) -> None:
    alice, bob = _bearer(db, "alice"), _bearer(db, "bob")
    created = client.post("/api/agents", headers=alice, json={"name": "keeper"}).json()
    agent_id, key = created["agent"]["id"], created["rawApiKey"]
    key_id = client.get(f"/api/agents/{agent_id}/keys", headers=alice).json()["keys"][0]["id"]
    keys, one = f"/api/agents/{agent_id}/keys", f"/api/agents/{agent_id}/keys/{key_id}"

    anonymous = [client.get(keys), client.post(keys, json={}), client.delete(one)]
    assert [answer.status_code for answer in anonymous] == [401, 401, 401]
    others = [
        client.get(keys, headers=bob),
        client.post(keys, headers=bob, json={"name": "mine"}),
        client.delete(one, headers=bob),
    ]
    assert [answer.status_code for answer in others] == [404, 404, 404]
    assert others[2].json()["error"]["message"] == (
        "you have no such agent on this portal: publish it (webagents publish), or see your "
        "agents with GET /api/agents"
    )
    assert _put(client, key, "still").status_code == 200  # bob revoked nothing

    bad = client.post(keys, headers=alice, json={"name": "lap\ttop"})
    assert (bad.status_code, bad.json()["error"]["message"]) == (
        400,
        "an agent key's name is 1-100 characters, no control characters, not 'lap\\ttop': "
        "choose another with webagents publish --key-name NAME",
    )
    unknown = client.delete(f"{keys}/{'0' * 8}-0000-0000-0000-{'0' * 12}", headers=alice)
    assert (unknown.status_code, unknown.json()["error"]["message"]) == (
        404,
        "this agent has no such key: see its keys on the agent's page",
    )
    assert client.post(keys, headers=alice, json={"name": "x", "color": 1}).status_code == 400


def test_p4_the_agent_page_lists_its_keys_and_revokes_one_with_csrf_for_its_owner_only(
    client: TestClient, db: Session
) -> None:
    alice = _bearer(db, "alice")
    created = client.post(
        "/api/agents", headers=alice, json={"name": "keeper", "keyName": "laptop"}
    )
    agent_id = created.json()["agent"]["id"]
    made = client.post(f"/api/agents/{agent_id}/keys", headers=alice, json={"name": "server"})
    server_id, server = made.json()["key"]["id"], made.json()["rawApiKey"]
    assert _put(client, server, "b").status_code == 200

    assert client.get(f"/agents/{agent_id}").status_code == 303  # anonymous: the sign-in page
    make_account(db, "bob")
    sign_in(client, "bob")
    revoke = f"/agents/{agent_id}/keys/{server_id}/revoke"
    assert client.get(f"/agents/{agent_id}").status_code == 404
    bob_token = csrf_of(client.get("/").text)
    assert client.post(revoke, data={"csrf_token": bob_token}).status_code == 404
    assert _put(client, server, "c").status_code == 200

    client.cookies.clear()
    sign_in(client, "alice")
    page = client.get(f"/agents/{agent_id}")
    assert page.status_code == 200
    assert '<table id="agent-keys">' in page.text
    rows = page.text.split('<table id="agent-keys">')[1].split("</table>")[0]
    assert rows.count("<tr>") == 3  # the header, laptop, server
    assert "<td>laptop</td>" in rows and "<td>server</td>" in rows
    assert rows.count("<td>never</td>") == 1  # laptop; server wrote a note
    assert client.post(revoke, data={}).status_code == 403
    assert _put(client, server, "d").status_code == 200
    done = client.post(revoke, data={"csrf_token": csrf_of(page.text)})
    assert (done.status_code, done.headers["location"]) == (303, f"/agents/{agent_id}")
    assert _put(client, server, "e").status_code == 401
    assert "revoked 20" in client.get(f"/agents/{agent_id}").text


def test_p4_agent_keys_of_another_accounts_agent_are_refused_where_they_are_made(
    db: Session,
) -> None:
    """The repository itself refuses: a caller that found another account's agent by its id
    (a path parameter, say) gets no key for it, nor its keys."""
    alice, bob = make_account(db, "alice"), make_account(db, "bob")
    agent = Agent(user_id=alice.user_id, name="keeper")
    db.add(agent)
    db.flush()
    with pytest.raises(NotFound) as refused:
        AgentKeys(db, bob, agent)
    assert refused.value.message == "there is no such agent on this portal: check the agent's link"
    assert db.scalars(select(AgentKey).where(AgentKey.agent_id == agent.id)).all() == []
    made = AgentKeys(db, alice, agent).make("laptop")
    assert [key.id for key in AgentKeys(db, alice, agent).all()] == [made.key.id]
