"""Issue 21: a name an agent gives up (renamed or deleted) stays its owner's for
names.KEPT_FOR. Before, another account could register the old name at once, and calls to
the old address (`/agents/<old>/chat/completions`) then reached the new owner's agent. While
kept, the old address answers 404 and only the owner may take the name again; afterwards
anyone may."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from fastapi.testclient import TestClient
from sqlalchemy import update
from sqlalchemy.orm import Session

from webagents.portal.accounts import service as accounts
from webagents.portal.agents import names
from webagents.portal.db.tables import RetiredAgentName

from .conftest import make_account

TAKEN = (
    "the agent name 'helper' is taken on this portal (by another account's agent, or kept "
    "for the account that gave it up lately): choose another name: in its AGENT.md"
)


def _bearer(db: Session, username: str) -> dict[str, str]:
    scope = make_account(db, username)
    return {"Authorization": f"Bearer {accounts.create_key(db, scope, 'cli').key}"}


def test_p4_a_renamed_agents_old_name_stays_its_owners_and_its_address_answers_404(
    client: TestClient, db: Session
) -> None:
    alice, bob = _bearer(db, "alice"), _bearer(db, "bob")
    agent_id = client.post("/api/agents", headers=alice, json={"name": "helper"}).json()["agent"][
        "id"
    ]
    renamed = client.patch(f"/api/agents/{agent_id}", headers=alice, json={"name": "aide"})
    assert renamed.json()["agent"]["name"] == "aide"

    taken = client.post("/api/agents", headers=bob, json={"name": "helper"})
    assert (taken.status_code, taken.json()["error"]["message"]) == (409, TAKEN)
    bobs = client.post("/api/agents", headers=bob, json={"name": "other"}).json()["agent"]["id"]
    to_old = client.patch(f"/api/agents/{bobs}", headers=bob, json={"name": "helper"})
    assert (to_old.status_code, to_old.json()["error"]["message"]) == (409, TAKEN)
    # No agent answers to the old name: a token for it (what a caller of its address
    # needs first) is a 404, so a caller's request reaches no one.
    old_address = client.post("/api/agents/token", headers=bob, json={"agent": "helper"})
    assert (old_address.status_code, old_address.json()["error"]["message"]) == (
        404,
        "there is no agent 'helper' on this portal",
    )

    # Its owner may take it back (for this agent or another of theirs).
    back = client.post("/api/agents", headers=alice, json={"name": "helper"})
    assert back.status_code == 201


def test_p4_a_given_up_name_is_free_for_anyone_after_the_time_it_is_kept(
    client: TestClient, db: Session
) -> None:
    alice, bob = _bearer(db, "alice"), _bearer(db, "bob")
    agent_id = client.post("/api/agents", headers=alice, json={"name": "helper"}).json()["agent"][
        "id"
    ]
    assert client.delete(f"/api/agents/{agent_id}", headers=alice).json() == {"deleted": True}
    refused = client.post("/api/agents", headers=bob, json={"name": "helper"})
    assert (refused.status_code, refused.json()["error"]["message"]) == (409, TAKEN)
    kept = db.get(RetiredAgentName, "helper")
    assert kept is not None
    assert kept.reserved_until - datetime.now(UTC) > names.KEPT_FOR - timedelta(minutes=1)

    db.execute(
        update(RetiredAgentName).values(reserved_until=datetime.now(UTC) - timedelta(seconds=1))
    )
    assert client.post("/api/agents", headers=bob, json={"name": "helper"}).status_code == 201
    assert db.get(RetiredAgentName, "helper") is None
