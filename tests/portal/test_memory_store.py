"""The memory store's rules (SPEC P5, P6) through its service, on SQLite and PostgreSQL:
entries and their ids, versions of every change, the stale-hash refusal, the change feed by
cursor, restore, and the two ways a store is made (the agent, its owner)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import event, func, select
from sqlalchemy.orm import Session

from webagents.portal.db.tables import MemoryVersion
from webagents.portal.errors import BadInput, Conflict, NotFound
from webagents.portal.memory import service
from webagents.portal.memory.repository import MemoryStore
from webagents.portal.memory.schemas import SyncLineIn, TooLarge, entry_id
from webagents.portal.scope import AgentScope
from webagents.portal_wire.memory import EntryOut

from .conftest import make_account
from .memory_helpers import publish, publish_for

AT = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


def _store(db: Session) -> tuple[MemoryStore, AgentScope]:
    published = publish(db)
    return MemoryStore.for_agent(db, published.scope), published.scope


def test_p5_put_then_get_returns_the_entry_with_its_uuid5_id(db: Session) -> None:
    store, scope = _store(db)
    made = service.put(
        store,
        namespace="caller:bob",
        key="prefs",
        content="likes tea",
        description="what bob likes",
        source="agent",
        at=AT,
        by=service.BY_AGENT,
    )
    expected = EntryOut(
        id=uuid.uuid5(uuid.NAMESPACE_URL, f"{scope.agent_id}\ncaller:bob\nprefs"),
        namespace="caller:bob",
        key="prefs",
        content="likes tea",
        description="what bob likes",
        source="agent",
        created_at=AT,
        updated_at=AT,
        content_sha256=service.sha256_of("likes tea"),
    )
    assert made == expected
    assert service.get(store, "caller:bob", "prefs") == expected
    assert service.get(store, "caller:carol", "prefs") is None


def test_p6_every_put_and_delete_is_kept_as_a_version(db: Session) -> None:
    store, _ = _store(db)
    service.put(store, namespace="owner", key="plan", content="one", by=service.BY_AGENT, at=AT)
    service.put(store, namespace="owner", key="plan", content="two", by=service.BY_SYNC, at=AT)
    assert service.delete(store, "owner", "plan", by=service.by_owner("alice"), at=AT) is True
    history = [(v.op, v.content, v.by, v.cursor) for v in service.versions(store, "owner", "plan")]
    assert history == [
        ("delete", "two", "owner:alice", 3),
        ("put", "two", "sync", 2),
        ("put", "one", "agent", 1),
    ]
    assert service.get(store, "owner", "plan") is None
    assert service.delete(store, "owner", "plan", by=service.BY_AGENT) is False


def test_p6_a_put_that_changes_nothing_keeps_no_version(db: Session) -> None:
    store, _ = _store(db)
    first = service.put(store, namespace="owner", key="a", content="x", by=service.BY_AGENT)
    again = service.put(store, namespace="owner", key="a", content="x", by=service.BY_AGENT)
    assert again == first
    assert len(service.versions(store, "owner", "a")) == 1


def test_p6_restore_brings_back_an_overwritten_and_a_forgotten_text(db: Session) -> None:
    store, _ = _store(db)
    service.put(store, namespace="shared", key="faq", content="old text", by=service.BY_AGENT)
    service.put(store, namespace="shared", key="faq", content="new text", by=service.BY_AGENT)
    old = service.versions(store, "shared", "faq")[-1]
    restored = service.restore_version(store, old.id, by=service.by_owner("alice"))
    assert (restored.content, restored.key) == ("old text", "faq")
    service.delete(store, "shared", "faq", by=service.BY_AGENT)
    forgotten = service.versions(store, "shared", "faq")[0]
    assert (forgotten.op, forgotten.content) == ("delete", "old text")
    back = service.restore_version(store, forgotten.id, by=service.by_owner("alice"))
    assert service.get(store, "shared", "faq") == back
    assert back.content == "old text"
    assert [v.by for v in service.versions(store, "shared", "faq")] == [
        "owner:alice",
        "agent",
        "owner:alice",
        "agent",
        "agent",
    ]


def test_p5_a_stale_content_sha256_is_a_conflict_that_changes_nothing(db: Session) -> None:
    store, _ = _store(db)
    made = service.put(store, namespace="owner", key="n", content="first", by=service.BY_AGENT)
    with pytest.raises(Conflict) as stale:
        service.put(
            store,
            namespace="owner",
            key="n",
            content="second",
            content_sha256=service.sha256_of("something else"),
            by=service.BY_AGENT,
        )
    assert stale.value.code == "stale_content"
    with pytest.raises(Conflict):  # "" means: must not exist yet
        service.put(
            store, namespace="owner", key="n", content="x", content_sha256="", by=service.BY_AGENT
        )
    with pytest.raises(Conflict):
        service.delete(store, "owner", "n", content_sha256="0" * 64, by=service.BY_AGENT)
    assert service.get(store, "owner", "n") == made
    assert len(service.versions(store, "owner", "n")) == 1
    fresh = service.put(
        store,
        namespace="owner",
        key="n",
        content="second",
        content_sha256=made.content_sha256,
        by=service.BY_AGENT,
    )
    assert fresh.content == "second"
    created = service.put(
        store, namespace="owner", key="m", content="new", content_sha256="", by=service.BY_AGENT
    )
    assert created.content == "new"


@pytest.mark.parametrize(
    ("namespace", "key", "code"),
    [
        ("callers", "ok", "bad_namespace"),
        ("caller:", "ok", "bad_namespace"),
        ("caller:a\nb", "ok", "bad_namespace"),
        ("owner", "Bad Key", "bad_key"),
        ("owner", "../x", "bad_key"),
        ("owner", "", "bad_key"),
    ],
)
def test_p5_bad_namespaces_and_keys_are_refused_with_the_rule(
    db: Session, namespace: str, key: str, code: str
) -> None:
    store, _ = _store(db)
    with pytest.raises(BadInput) as refused:
        service.put(store, namespace=namespace, key=key, content="x", by=service.BY_AGENT)
    assert refused.value.code == code
    assert db.scalar(select(func.count()).select_from(MemoryVersion)) == 0


def test_p5_a_note_over_the_size_limit_is_413(db: Session) -> None:
    store, _ = _store(db)
    with pytest.raises(TooLarge) as big:
        service.put(
            store, namespace="owner", key="big", content="x" * 1_000_001, by=service.BY_AGENT
        )
    assert big.value.status == 413
    assert "split it" in big.value.message


def test_p5_sync_pages_changes_by_a_cursor_that_only_grows(db: Session) -> None:
    store, _ = _store(db)
    for n in range(5):
        service.put(store, namespace="owner", key=f"k{n}", content=str(n), by=service.BY_AGENT)
    service.put(store, namespace="caller:bob", key="b", content="bob's", by=service.BY_AGENT)
    service.delete(store, "owner", "k1", by=service.BY_AGENT)
    first = service.changes(store, ["owner"], 0, limit=2)
    assert [(line.op, line.key, line.cursor) for line in first.lines] == [
        ("put", "k0", 1),
        ("put", "k2", 3),
    ]
    assert (first.cursor, first.more) == (3, True)
    second = service.changes(store, ["owner"], first.cursor, limit=2)
    assert [(line.op, line.key) for line in second.lines] == [("put", "k3"), ("put", "k4")]
    third = service.changes(store, ["owner"], second.cursor, limit=2)
    assert [(line.op, line.key, line.content) for line in third.lines] == [("delete", "k1", None)]
    assert (third.cursor, third.more) == (7, False)
    everything = service.changes(store, None, 0, limit=100)
    assert [line.key for line in everything.lines] == ["k0", "k2", "k3", "k4", "b", "k1"]
    assert service.changes(store, ["owner"], 7).lines == []


def test_p5_applied_lines_are_all_or_nothing(db: Session) -> None:
    store, scope = _store(db)
    lines = [
        SyncLineIn(op="put", key="a", content="A", description="d", source="sync", at=AT),
        SyncLineIn(op="put", key="b", content="B"),
        SyncLineIn(op="delete", key="a"),
    ]
    assert service.apply_lines(store, "caller:bob", lines) == 3
    assert service.get(store, "caller:bob", "a") is None
    assert service.get(store, "caller:bob", "b") is not None
    wrong_id = SyncLineIn(op="put", key="c", content="C", id=uuid.uuid4())
    with pytest.raises(BadInput) as refused:
        service.apply_lines(store, "caller:bob", [wrong_id])
    assert refused.value.code == "bad_id"
    right_id = uuid.uuid5(uuid.NAMESPACE_URL, f"{scope.agent_id}\ncaller:bob\nc")
    assert service.apply_lines(store, "caller:bob", [wrong_id.model_copy(update={"id": right_id})])


def test_p5_an_agent_reaches_only_its_own_store(db: Session) -> None:
    mine = publish(db)
    theirs = publish(db, owner="bob", agent="other")
    my_store = MemoryStore.for_agent(db, mine.scope)
    their_store = MemoryStore.for_agent(db, theirs.scope)
    service.put(my_store, namespace="owner", key="secret", content="mine", by=service.BY_AGENT)
    assert service.get(their_store, "owner", "secret") is None
    assert service.list_entries(their_store, ["owner"]) == []
    assert service.changes(their_store, None, 0).lines == []


def test_p5_entries_by_id_are_the_agents_own_and_looked_up_by_their_key(db: Session) -> None:
    """Search reads its hits by id: another agent's ids give nothing, forgotten ones nothing,
    and on SQLite each id is a primary-key lookup, not a read of all the agent's notes (the
    plan SQLite's planner took without statistics)."""
    mine, theirs = publish(db), publish(db, owner="bob", agent="other")
    my_store = MemoryStore.for_agent(db, mine.scope)
    their_store = MemoryStore.for_agent(db, theirs.scope)
    for n in range(12):  # a search's ten hits and more: the planner weighs the lookups
        service.put(my_store, namespace="owner", key=f"k{n}", content="x", by=service.BY_AGENT)
    service.delete(my_store, "owner", "k11", by=service.BY_AGENT)
    ids = [service.get(my_store, "owner", f"k{n}") for n in range(11)]
    wanted = [uuid.UUID(str(e.id)) for e in ids if e is not None]
    forgotten = entry_id(mine.scope.agent_id, "owner", "k11")
    assert my_store.entry("owner", "k11") is not None  # a tombstone, with that id
    assert set(my_store.live_by_ids([*wanted, forgotten])) == set(wanted)
    assert their_store.live_by_ids(wanted) == {}
    if db.get_bind().dialect.name != "sqlite":
        return
    statements: list[tuple[str, Any]] = []

    def seen(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        if "FROM memory_entries" in statement:
            statements.append((statement, parameters))

    engine = db.get_bind()
    event.listen(engine, "before_cursor_execute", seen)
    try:
        my_store.live_by_ids(wanted)
    finally:
        event.remove(engine, "before_cursor_execute", seen)
    [(statement, parameters)] = statements
    plan = db.connection().exec_driver_sql("EXPLAIN QUERY PLAN " + statement, parameters)
    details = " ".join(str(row[-1]) for row in plan)
    assert "sqlite_autoindex_memory_entries_1 (id=?)" in details, details


def test_p8_the_owner_reaches_the_store_and_no_one_else_does(db: Session) -> None:
    mine = publish(db)
    service.put(
        MemoryStore.for_agent(db, mine.scope),
        namespace="owner",
        key="plan",
        content="x",
        by=service.BY_AGENT,
    )
    owned = MemoryStore.for_owner(db, mine.owner, mine.scope.agent_id)
    assert service.get(owned, "owner", "plan") is not None
    stranger = make_account(db, "mallory")
    with pytest.raises(NotFound):
        MemoryStore.for_owner(db, stranger, mine.scope.agent_id)
    with pytest.raises(NotFound):
        MemoryStore.for_owner(db, mine.owner, uuid.uuid4())
    with pytest.raises(TypeError):
        MemoryStore(db, mine.scope.agent_id)
    publish_for(db, stranger, "malloryagent")
    assert MemoryStore.for_owner(db, mine.owner, mine.scope.agent_id).agent_id == (
        mine.scope.agent_id
    )
