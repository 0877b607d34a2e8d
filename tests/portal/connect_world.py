"""The portal the Portal Connect tests run against: three users with API keys (alice, bob,
carol), alice's agent "helper" and bob's agent "other", made over real HTTP on a served
portal. A portal shared by a file's tests keeps the accounts and makes the agents anew for
each test (make_agents, remove_agents)."""

from __future__ import annotations

from dataclasses import dataclass

import httpx

from webagents.portal import admin
from webagents.portal.settings import PortalSettings

from .conftest import PASSWORD

HI = [{"role": "user", "content": "Hi there"}]


@dataclass
class World:
    url: str
    database: str
    keys: dict[str, str]  # username -> API key
    agent_id: str
    agent_key: str
    other_agent_key: str  # bob's agent "other"
    other_agent_id: str

    def headers(self, username: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.keys[username]}"}

    def endpoint(self, name: str = "helper") -> str:
        return f"{self.url}/agents/{name}/chat/completions"


def make_accounts(database: str) -> dict[str, str]:
    """alice, bob and carol, each with an API key: username -> key."""
    engine = admin.open_database(PortalSettings(database_url=database))
    try:
        keys = {}
        for username in ("alice", "bob", "carol"):
            admin.add_user(engine, username, PASSWORD)
            keys[username] = admin.new_api_key(engine, username, "test").key
    finally:
        engine.dispose()
    return keys


def make_agents(url: str, database: str, keys: dict[str, str]) -> World:
    """alice's agent "helper" and bob's "other", made over the API for the accounts `keys`."""
    made = {}
    for username, name in (("alice", "helper"), ("bob", "other")):
        answer = httpx.post(
            f"{url}/api/agents",
            json={"name": name},
            headers={"Authorization": f"Bearer {keys[username]}"},
        )
        assert answer.status_code == 201, answer.text
        made[name] = answer.json()
    return World(
        url,
        database,
        keys,
        made["helper"]["agent"]["id"],
        made["helper"]["rawApiKey"],
        made["other"]["rawApiKey"],
        made["other"]["agent"]["id"],
    )


def remove_agents(world: World) -> None:
    """The agents of `make_agents` deleted over the API: their owners may make them again
    (a portal shared by several tests' worlds)."""
    for username, agent_id in (("alice", world.agent_id), ("bob", world.other_agent_id)):
        address = f"{world.url}/api/agents/{agent_id}"
        deleted = httpx.delete(address, headers=world.headers(username))
        assert deleted.status_code == 200, deleted.text


def make_world(url: str, database: str) -> World:
    """The accounts and their agents on the portal at `url`, on the database `database`."""
    return make_agents(url, database, make_accounts(database))
