"""Retention (SPEC P6) on SQLite and PostgreSQL: the rules (per namespace, for all callers at
once, a caller's own first), the sweep a test runs with its own `now` (expired entries
removed as versions and sync deletes, fresh ones kept, versions older than the period gone),
and the background sweeper of `webagents portal serve`, two of them at once."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from webagents.portal.db.engine import make_engine, make_sessions
from webagents.portal.db.migrate import upgrade
from webagents.portal.db.tables import MemoryVersion
from webagents.portal.errors import BadInput
from webagents.portal.memory import retention, service
from webagents.portal.memory.repository import MemoryStore
from webagents.portal.memory.retention import Rule, Swept
from webagents.portal.settings import PortalSettings

from .memory_helpers import publish

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def _put(store: MemoryStore, namespace: str, key: str, days_ago: float, content: str = "") -> None:
    service.put(
        store,
        namespace=namespace,
        key=key,
        content=content or f"{namespace}/{key}",
        description=f"about {key}",
        at=NOW - timedelta(days=days_ago),
        by=service.BY_AGENT,
    )


def test_p6_retention_removes_expired_entries_keeps_fresh_ones_and_syncs_the_removal(
    db: Session,
) -> None:
    published = publish(db)
    agent_id = published.scope.agent_id
    store = MemoryStore.for_agent(db, published.scope)
    _put(store, "owner", "old", 40)
    _put(store, "owner", "fresh", 1)
    _put(store, "shared", "ancient", 400)  # no rule for shared: kept forever
    _put(store, "caller:alice", "old", 10)
    _put(store, "caller:alice", "fresh", 2)
    _put(store, "caller:bob", "old", 10)  # bob's own rule (30 days) comes first
    retention.set_rule(store, "owner", "30")
    retention.set_rule(store, "caller:*", 7)
    retention.set_rule(store, "caller:bob", 30)
    assert retention.rules_of(store) == [
        Rule("caller:*", 7),
        Rule("caller:bob", 30),
        Rule("owner", 30),
    ]
    before = service.changes(store, None, 0).cursor

    assert retention.sweep(db, NOW) == {
        agent_id: Swept([("owner", "old"), ("caller:alice", "old")], versions=2)
    }

    live = {(e.namespace, e.key) for e in service.list_entries(store, None)}
    assert live == {
        ("owner", "fresh"),
        ("shared", "ancient"),
        ("caller:alice", "fresh"),
        ("caller:bob", "old"),
    }
    lines = service.changes(store, None, before).lines
    assert [(line.op, line.namespace, line.key, line.at) for line in lines] == [
        ("delete", "owner", "old", NOW),
        ("delete", "caller:alice", "old", NOW),
    ]
    # The removal is kept as a version (with what was removed); the put older than the
    # period is gone, as P6 says; the removal's version brings the text back.
    kept = service.versions(store, "owner", "old")
    assert [(v.op, v.by, v.at, v.content) for v in kept] == [
        ("delete", "retention", NOW, "owner/old")
    ]
    restored = service.restore_version(store, kept[0].id, by=service.by_owner("alice"))
    assert (restored.content, restored.description) == ("owner/old", "about old")
    assert [(v.op, v.by) for v in service.versions(store, "caller:bob", "old")] == [
        ("put", "agent")
    ]


def test_p6_a_second_sweep_finds_nothing_and_a_changed_entry_is_not_expired(
    db: Session,
) -> None:
    published = publish(db)
    agent_id = published.scope.agent_id
    store = MemoryStore.for_agent(db, published.scope)
    _put(store, "owner", "old", 40)
    _put(store, "owner", "edited", 40)
    _put(store, "owner", "edited", 0, content="new text")
    retention.set_rule(store, "owner", 30)
    # Removed: "old", its put's version and the first put of "edited" (both 40 days old).
    assert retention.sweep(db, NOW) == {agent_id: Swept([("owner", "old")], versions=2)}
    assert retention.sweep(db, NOW) == {agent_id: Swept([], versions=0)}
    assert [(v.op, v.content) for v in service.versions(store, "owner", "edited")] == [
        ("put", "new text")
    ]


def test_p6_retention_is_per_agent_and_removing_a_rule_keeps_everything(db: Session) -> None:
    alice = publish(db, "alice", "helper")
    bob = publish(db, "bob", "other")
    for who in (alice, bob):
        _put(MemoryStore.for_agent(db, who.scope), "owner", "old", 40)
    retention.set_rule(MemoryStore.for_agent(db, alice.scope), "owner", 30)
    retention.set_rule(MemoryStore.for_agent(db, bob.scope), "owner", 30)
    retention.set_rule(MemoryStore.for_agent(db, bob.scope), "owner", "")  # empty: keep forever
    assert retention.rules_of(MemoryStore.for_agent(db, bob.scope)) == []
    assert retention.sweep(db, NOW) == {alice.scope.agent_id: Swept([("owner", "old")], versions=1)}
    assert service.get(MemoryStore.for_agent(db, bob.scope), "owner", "old") is not None


@pytest.mark.parametrize(
    ("namespace", "days", "message"),
    [
        (
            "callers",
            7,
            "'callers' is not a namespace of an agent's memory: choose owner, shared, "
            "caller:<identity>, or caller:* for every caller's namespace",
        ),
        (
            "caller:",
            7,
            "'caller:' is not a namespace of an agent's memory: choose owner, shared, "
            "caller:<identity>, or caller:* for every caller's namespace",
        ),
        (
            "caller:a,b",
            7,
            "'caller:a,b' is not a namespace of an agent's memory: choose owner, shared, "
            "caller:<identity>, or caller:* for every caller's namespace",
        ),
        (
            "owner",
            "0",
            "retention is a whole number of days from 1 to 36500 (or empty to keep entries "
            "until they are forgotten), not '0'",
        ),
        (
            "owner",
            "ten",
            "retention is a whole number of days from 1 to 36500 (or empty to keep entries "
            "until they are forgotten), not 'ten'",
        ),
        (
            "owner",
            36501,
            "retention is a whole number of days from 1 to 36500 (or empty to keep entries "
            "until they are forgotten), not 36501",
        ),
    ],
)
def test_p6_bad_retention_is_refused_with_what_to_give(
    db: Session, namespace: str, days: str | int, message: str
) -> None:
    published = publish(db)
    with pytest.raises(BadInput) as refused:
        retention.set_rule(MemoryStore.for_agent(db, published.scope), namespace, days)
    assert refused.value.message == message
    assert retention.rules_of(MemoryStore.for_agent(db, published.scope)) == []


def test_p6_background_sweepers_in_parallel_remove_each_expired_entry_once(
    fresh_database_url: str, tmp_path: Path
) -> None:
    """What `portal serve` runs, twice at once (two processes would): one removal each."""
    engine = make_engine(PortalSettings(database_url=fresh_database_url))
    try:
        upgrade(engine)
        sessions = make_sessions(engine)
        with sessions() as db:
            published = publish(db)
            agent_id = published.scope.agent_id
            store = MemoryStore.for_agent(db, published.scope)
            now = datetime.now(UTC)
            for number in range(20):
                service.put(
                    store,
                    namespace="caller:alice",
                    key=f"old-{number}",
                    content="x",
                    at=now - timedelta(days=9),
                    by=service.BY_AGENT,
                )
            _put(store, "caller:alice", "fresh", -1)
            retention.set_rule(store, "caller:*", 7)
            db.commit()
        sweepers = [retention.Sweeper(sessions, every=0.05).start() for _ in range(2)]
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and _deletes(sessions, agent_id) < 20:
                time.sleep(0.05)
        finally:
            for sweeper in sweepers:
                sweeper.stop()
        assert _deletes(sessions, agent_id) == 20
        with sessions() as db:
            store = MemoryStore.for_agent(db, published.scope)
            assert [e.key for e in service.list_entries(store, None)] == ["fresh"]
    finally:
        engine.dispose()


def _deletes(sessions: object, agent_id: uuid.UUID) -> int:
    from sqlalchemy.orm import sessionmaker

    assert isinstance(sessions, sessionmaker)
    with sessions() as db:
        return len(
            db.scalars(
                select(MemoryVersion.id).where(
                    MemoryVersion.agent_id == agent_id, MemoryVersion.op == "delete"
                )
            ).all()
        )
