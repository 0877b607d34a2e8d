"""A served portal's memory store in tests: an agent and an entry put in it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from .account_helpers import new_user_key

MEMORY = "/api/storage/memory-scoped"


def _agent(tmp_path: Path, url: str, database: str) -> tuple[str, dict[str, str]]:
    """alice (password PASSWORD) and her published agent: its id and the agent's headers."""
    key = new_user_key(database, "alice")
    made = httpx.post(
        f"{url}/api/agents", headers={"Authorization": f"Bearer {key}"}, json={"name": "helper"}
    )
    assert made.status_code == 201, made.text
    body = made.json()
    return body["agent"]["id"], {"Authorization": f"Bearer {body['rawApiKey']}"}


def _put(url: str, agent: dict[str, str], **entry: Any) -> dict[str, Any]:
    answer = httpx.put(f"{url}{MEMORY}", headers=agent, json=entry)
    assert answer.status_code == 200, answer.text
    found: dict[str, Any] = answer.json()["entry"]
    return found
