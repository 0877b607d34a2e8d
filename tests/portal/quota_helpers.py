"""The memory store's quota tests' API (test_memory_quotas.py, test_memory_version_quotas.py):
the app with some quotas set, a note put as the agent, and the refusal a write over a quota
gets; and, for their migrations' tests, a database at an earlier revision with agents."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import httpx
from alembic import command
from fastapi.testclient import TestClient
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from webagents.portal.db.engine import make_engine
from webagents.portal.db.migrate import alembic_config
from webagents.portal.db.tables import Agent, User
from webagents.portal.settings import MemoryQuotas, PortalSettings

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


def engine_at(database_url: str, revision: str) -> Engine:
    """An engine on the (empty) database, migrated up to `revision` only."""
    engine = make_engine(PortalSettings(database_url=database_url))
    with engine.connect() as connection:
        command.upgrade(alembic_config(connection), revision)
        connection.commit()
    return engine


def agents_of_alice(session: Session, *names: str) -> list[uuid.UUID]:
    """A user alice with agents of these names (flushed): their ids."""
    user = User(username="alice", password_hash="-")
    session.add(user)
    session.flush()
    agents = [Agent(user_id=user.id, name=name, skills=[]) for name in names]
    session.add_all(agents)
    session.flush()
    return [agent.id for agent in agents]
