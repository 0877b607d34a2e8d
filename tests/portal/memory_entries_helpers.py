"""The memory store's entries for the memory pages' tests: an agent, a put, a commit."""

from __future__ import annotations

from datetime import UTC, datetime

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, object_session

from webagents.portal.memory import service
from webagents.portal.memory.repository import MemoryStore

from .conftest import sign_in
from .memory_helpers import Published, publish

AT = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


def _agent(db: Session, client: TestClient) -> tuple[Published, MemoryStore, str]:
    published = publish(db)
    sign_in(client, "alice")
    return (
        published,
        MemoryStore.for_agent(db, published.scope),
        f"/agents/{published.scope.agent_id}/memory",
    )


def _put(store: MemoryStore, namespace: str, key: str, content: str, description: str = "") -> None:
    service.put(
        store,
        namespace=namespace,
        key=key,
        content=content,
        description=description,
        source="agent",
        at=AT,
        by=service.BY_AGENT,
    )
    # As the agent's own request would: committed (a refused page request rolls back its own).
    _commit(store, namespace, key)


def _commit(store: MemoryStore, namespace: str, key: str) -> None:
    """Commit the transaction the store's entry was written in (a store keeps its session
    to itself)."""
    written = object_session(store.entry(namespace, key))
    assert written is not None
    written.commit()
