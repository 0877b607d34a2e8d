"""The memory store's quota tests' API (test_memory_quotas.py, test_memory_version_quotas.py):
the app with some quotas set, a note put as the agent, and the refusal a write over a quota
gets."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import httpx
from fastapi.testclient import TestClient
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from webagents.portal.memory.quotas import MemoryQuotas
from webagents.portal.settings import PortalSettings

from .conftest import make_client
from .memory_helpers import Published

URL = "/api/storage/memory-scoped"


def limited_api(
    settings: PortalSettings, engine: Engine, db: Session, **quotas: int
) -> Iterator[TestClient]:
    """The API with these quotas (the others at their defaults)."""
    limited = replace(settings, memory_quotas=MemoryQuotas(**quotas))
    with make_client(limited, engine, db) as client:
        yield client


def put_note(api: TestClient, agent: Published, key: str, content: str) -> httpx.Response:
    body = {"namespace": "owner", "key": key, "content": content}
    return api.put(URL, headers=agent.headers, json=body)


def refusal(message: str, code: str, option: str) -> dict[str, Any]:
    """The answer to a write over a quota: `param` names the option that sets the quota."""
    return {
        "error": {"message": message, "type": "rate_limit_error", "param": option, "code": code}
    }
