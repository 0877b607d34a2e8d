"""The portal the Portal Connect tests run against: three users with API keys (alice, bob,
carol), alice's agent "helper" and bob's agent "other", made over real HTTP on a served
portal."""

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

    def headers(self, username: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.keys[username]}"}

    def endpoint(self, name: str = "helper") -> str:
        return f"{self.url}/agents/{name}/chat/completions"


def make_world(url: str, database: str) -> World:
    engine = admin.open_database(PortalSettings(database_url=database))
    try:
        keys = {}
        for username in ("alice", "bob", "carol"):
            admin.add_user(engine, username, PASSWORD)
            keys[username] = admin.new_api_key(engine, username, "test").key
    finally:
        engine.dispose()
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
    )
