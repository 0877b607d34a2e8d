"""The agent's page says which `webagents serve` processes are connected to the portal now
(Portal Connect's directory: one row per connection, renewed while its portal process lives),
for the agent's owner only (P4, P12)."""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime, timedelta

from fastapi.testclient import TestClient
from sqlalchemy import delete
from sqlalchemy.orm import Session

from webagents.portal.accounts import service as accounts
from webagents.portal.agents.repository import Agents
from webagents.portal.db.tables import CONNECTION_STALE, Agent, AgentConnection

from .conftest import make_account, sign_in


def _connect(db: Session, agent_id: uuid.UUID, since: datetime, seen: datetime) -> None:
    db.add(
        AgentConnection(
            id=uuid.uuid4(), agent_id=agent_id, process_id=uuid.uuid4(), since=since, seen_at=seen
        )
    )
    db.flush()


def _agent(client: TestClient, db: Session, username: str, name: str) -> uuid.UUID:
    key = accounts.create_key(db, make_account(db, username), "cli").key
    made = client.post(
        "/api/agents", headers={"Authorization": f"Bearer {key}"}, json={"name": name}
    )
    assert made.status_code == 201, made.text
    return uuid.UUID(made.json()["agent"]["id"])


def _connected(page: str) -> tuple[str, list[str]]:
    said = re.search(r'<p id="connected">(.*?)</p>', page, re.S)
    assert said is not None, page
    listed = re.search(r'<ul id="connected-since">(.*?)</ul>', page, re.S)
    return said.group(1), re.findall(r"<li>(.*?)</li>", listed.group(1)) if listed else []


def test_p12_the_agent_page_lists_the_processes_connected_now_for_its_owner_only(
    client: TestClient, db: Session
) -> None:
    keeper = _agent(client, db, "alice", "keeper")
    other = _agent(client, db, "bob", "bobs-agent")
    # Live rows are renewed "later" than the page looks (an hour ahead), so that no slow run
    # can make them stale before the page is read; the dead one was last renewed a day ago.
    now = datetime.now(UTC)
    later = now + timedelta(hours=1)
    first, second = now - timedelta(hours=2), now - timedelta(minutes=5)
    _connect(db, keeper, second, later)
    _connect(db, keeper, first, later)
    _connect(db, keeper, now - timedelta(days=2), now - timedelta(days=1))  # a dead process's
    _connect(db, other, now - timedelta(hours=1), later)  # another account's agent

    sign_in(client, "alice")
    said, since = _connected(client.get(f"/agents/{keeper}").text)
    assert said == (
        "2 processes of <code>webagents serve</code> connected over Portal Connect, answering "
        "the endpoint's callers:"
    )
    assert since == [f"since {at.strftime('%Y-%m-%d %H:%M')} UTC" for at in (first, second)]

    # The repository answers for the scope's own agents only.
    carol = make_account(db, "carol")
    alices_agent = db.get(Agent, keeper)
    assert alices_agent is not None
    assert Agents(db, carol).connections_since(alices_agent, now - CONNECTION_STALE) == []

    db.execute(delete(AgentConnection).where(AgentConnection.agent_id == keeper))
    db.flush()
    assert _connected(client.get(f"/agents/{keeper}").text) == (
        "None: until <code>webagents serve</code> runs in the agent's folder, its callers are "
        "answered 503 <code>agent_offline</code>.",
        [],
    )
