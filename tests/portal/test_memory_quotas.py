"""The memory store's quotas (issue 21; portal/memory/quotas.py), on SQLite and PostgreSQL:
per agent and per user, entries and bytes, a write over one answered 429 with the quota's
code and what to do, and nothing stored; a write that adds nothing always passes; versions
beyond the bound dropped oldest first, never the current one; the bounds set by `webagents
portal serve` options (a real process)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, Uuid, bindparam, select, text
from sqlalchemy.orm import Session

from webagents.portal.admin import open_database
from webagents.portal.db.engine import make_sessions
from webagents.portal.db.migrate import upgrade
from webagents.portal.db.tables import MemoryEntry, MemoryFeed, MemoryVersion
from webagents.portal.memory import service
from webagents.portal.memory.repository import MemoryStore
from webagents.portal.settings import PortalSettings

from .memory_helpers import Published, publish, publish_for
from .processes import Served
from .quota_helpers import URL, agents_of_alice, engine_at, limited_api, put_note, refusal

FREE = (
    "nothing was stored: forget notes the agent no longer needs (memory_forget, or the "
    "owner's memory pages), or ask the portal's administrator to raise"
)


@pytest.fixture
def small(settings: PortalSettings, migrated_engine: Engine, db: Session) -> Iterator[TestClient]:
    """The API with room for 2 notes and 10 bytes an agent, 3 notes and 15 bytes a user, 3
    versions a note."""
    yield from limited_api(
        settings,
        migrated_engine,
        db,
        agent_entries=2,
        agent_bytes=10,
        user_entries=3,
        user_bytes=15,
        versions_per_entry=3,
    )


def _push(api: TestClient, agent: Published, *keys: str) -> httpx.Response:
    """A sync push of one note "x" under each of `keys`."""
    lines = [{"op": "put", "key": key, "content": "x"} for key in keys]
    body = {"namespace": "owner", "lines": lines}
    return api.post(URL, headers=agent.headers, params={"action": "sync"}, json=body)


def _kept(db: Session, agent: Published) -> dict[str, str]:
    """The agent's live notes, by key."""
    rows = db.execute(
        select(MemoryEntry.key, MemoryEntry.content).where(
            MemoryEntry.agent_id == agent.scope.agent_id, MemoryEntry.deleted_at.is_(None)
        )
    )
    return {str(key): str(content) for key, content in rows}


def _usage(db: Session, agent: Published) -> tuple[int, int]:
    found = db.execute(
        select(MemoryFeed.entries, MemoryFeed.bytes).where(
            MemoryFeed.agent_id == agent.scope.agent_id
        )
    ).one_or_none()
    return (int(found[0]), int(found[1])) if found is not None else (0, 0)


def _versions(db: Session, agent: Published) -> int:
    return len(
        db.scalars(
            select(MemoryVersion.id).where(MemoryVersion.agent_id == agent.scope.agent_id)
        ).all()
    )


def test_p5_an_agent_over_its_entries_quota_is_refused_429_and_nothing_is_stored(
    small: TestClient, db: Session
) -> None:
    agent = publish(db)
    assert [put_note(small, agent, k, "x").status_code for k in ("a", "b")] == [200, 200]
    refused = put_note(small, agent, "c", "x")
    assert (refused.status_code, refused.json()) == (
        429,
        refusal(
            "this agent keeps 2 notes in the portal, the most it may (2); "
            f"{FREE} --memory-agent-entries",
            "agent_entries_quota",
            "--memory-agent-entries",
        ),
    )
    assert (_kept(db, agent), _usage(db, agent), _versions(db, agent)) == (
        {"a": "x", "b": "x"},
        (2, 2),
        2,
    )
    # An overwrite adds no note; after a forget there is room again.
    assert put_note(small, agent, "a", "y").status_code == 200
    forgot = small.delete(URL, headers=agent.headers, params={"namespace": "owner", "key": "b"})
    assert forgot.json() == {"forgotten": True}
    assert put_note(small, agent, "c", "z").status_code == 200
    assert (_kept(db, agent), _usage(db, agent)) == ({"a": "y", "c": "z"}, (2, 2))


def test_p5_an_agent_over_its_bytes_quota_is_refused_429_and_may_always_shrink(
    small: TestClient, db: Session
) -> None:
    agent = publish(db)
    assert put_note(small, agent, "a", "12345").status_code == 200
    refused = put_note(small, agent, "b", "123456")
    assert (refused.status_code, refused.json()) == (
        429,
        refusal(
            "this note would bring this agent's notes in the portal to 11 bytes, over the 10 "
            f"bytes it may keep; {FREE} --memory-agent-bytes",
            "agent_bytes_quota",
            "--memory-agent-bytes",
        ),
    )
    grown = put_note(small, agent, "a", "12345678901")
    assert (grown.status_code, grown.json()["error"]["code"]) == (429, "agent_bytes_quota")
    assert (_kept(db, agent), _usage(db, agent)) == ({"a": "12345"}, (1, 5))
    assert put_note(small, agent, "a", "1234567890").status_code == 200  # exactly the quota
    assert put_note(small, agent, "a", "é").status_code == 200  # smaller: always taken
    assert _usage(db, agent) == (1, 2)  # bytes of UTF-8, not characters


def test_p5_a_users_agents_share_the_users_quotas_and_other_users_are_not_counted(
    small: TestClient, db: Session
) -> None:
    first = publish(db)
    second = publish_for(db, first.owner, "second")
    stranger = publish(db, owner="bob", agent="strangers")
    assert [put_note(small, first, k, "x").status_code for k in ("a", "b")] == [200, 200]
    assert put_note(small, second, "a", "x").status_code == 200
    refused = put_note(small, second, "b", "x")
    assert (refused.status_code, refused.json()) == (
        429,
        refusal(
            "the agents of this agent's owner keep 3 notes in the portal, the most one user's "
            f"agents may (3); {FREE} --memory-user-entries",
            "user_entries_quota",
            "--memory-user-entries",
        ),
    )
    assert (_kept(db, second), _usage(db, second)) == ({"a": "x"}, (1, 1))
    assert [put_note(small, stranger, k, "x").status_code for k in ("a", "b")] == [200, 200]


def test_p5_a_user_over_the_users_bytes_quota_is_refused_with_its_code(
    settings: PortalSettings, migrated_engine: Engine, db: Session
) -> None:
    first = publish(db)
    second = publish_for(db, first.owner, "second")
    for api in limited_api(settings, migrated_engine, db, agent_bytes=100, user_bytes=15):
        assert put_note(api, first, "a", "1234567890").status_code == 200
        refused = put_note(api, second, "a", "123456")
        assert (refused.status_code, refused.json()) == (
            429,
            refusal(
                "this note would bring the notes of this agent's owner's agents in the portal "
                f"to 16 bytes, over the 15 bytes one user's agents may keep; {FREE} "
                "--memory-user-bytes",
                "user_bytes_quota",
                "--memory-user-bytes",
            ),
        )
        assert put_note(api, second, "a", "12345").status_code == 200
    assert (_kept(db, second), _usage(db, second)) == ({"a": "12345"}, (1, 5))


def test_p5_a_sync_push_over_a_quota_stores_none_of_its_lines(
    small: TestClient, db: Session
) -> None:
    agent = publish(db)
    pushed = _push(small, agent, "a", "b", "c")
    assert (pushed.status_code, pushed.json()["error"]["code"]) == (429, "agent_entries_quota")
    assert (_kept(db, agent), _usage(db, agent), _versions(db, agent)) == ({}, (0, 0), 0)


def test_p5_quota_refusals_name_the_option_in_param_and_send_no_retry_after(
    small: TestClient, db: Session
) -> None:
    """A quota is a count that waiting does not free: no Retry-After, for a PUT or a push."""
    agent = publish(db)
    assert [put_note(small, agent, k, "x").status_code for k in ("a", "b")] == [200, 200]
    refused = put_note(small, agent, "c", "x")
    pushed = _push(small, agent, "d", "e")
    expected = refusal(
        f"this agent keeps 2 notes in the portal, the most it may (2); {FREE} "
        "--memory-agent-entries",
        "agent_entries_quota",
        "--memory-agent-entries",
    )
    for answer in (refused, pushed):
        assert (answer.status_code, answer.json(), "retry-after" in answer.headers) == (
            429,
            expected,
            False,
        )
    assert (_kept(db, agent), _usage(db, agent)) == ({"a": "x", "b": "x"}, (2, 2))


def test_p6_versions_beyond_the_bound_are_dropped_oldest_first_never_the_current(
    small: TestClient, db: Session
) -> None:
    agent = publish(db)
    for n in range(1, 6):
        assert put_note(small, agent, "plan", f"v{n}").status_code == 200
    store = MemoryStore.for_agent(db, agent.scope)

    def history() -> list[tuple[str, str]]:
        return [(v.op, v.content) for v in service.versions(store, "owner", "plan")]

    assert history() == [("put", "v5"), ("put", "v4"), ("put", "v3")]
    gone = small.delete(URL, headers=agent.headers, params={"namespace": "owner", "key": "plan"})
    assert gone.json() == {"forgotten": True}
    assert history() == [("delete", "v5"), ("put", "v5"), ("put", "v4")]
    assert _usage(db, agent) == (0, 0)


@pytest.mark.e2e  # runs the installed webagents command
def test_p5_portal_serve_sets_the_quotas_from_its_options(
    tmp_path: Path, fresh_database_url: str
) -> None:
    engine = open_database(PortalSettings(database_url=fresh_database_url))
    try:
        with make_sessions(engine)() as session:
            agent = publish(session)  # it commits
    finally:
        engine.dispose()
    served = Served(
        tmp_path,
        "--database",
        fresh_database_url,
        "--memory-agent-entries",
        "1",
        "--memory-agent-bytes",
        "1K",
        "--memory-versions",
        "2",
    )
    try:
        with httpx.Client(base_url=served.url, headers=agent.headers) as http:

            def put(key: str, content: str) -> tuple[int, str | None]:
                body = {"namespace": "owner", "key": key, "content": content}
                answer = http.put(URL, json=body)
                return answer.status_code, answer.json().get("error", {}).get("code")

            assert put("a", "x" * 1024) == (200, None)
            assert put("a", "x" * 1025) == (429, "agent_bytes_quota")
            assert put("b", "y") == (429, "agent_entries_quota")
            assert put("a", "v3") == (200, None)
            assert put("a", "v4") == (200, None)
            params = {"action": "get", "namespace": "owner", "key": "a"}
            assert http.get(URL, params=params).json()["entry"]["content"] == "v4"
    finally:
        served.stop()
    engine = open_database(PortalSettings(database_url=fresh_database_url))
    try:
        with make_sessions(engine)() as session:
            kept = session.scalars(select(MemoryVersion.content).order_by(MemoryVersion.cursor))
            assert list(kept) == ["v3", "v4"]
    finally:
        engine.dispose()


def test_p5_the_quotas_migration_counts_the_notes_already_kept(empty_database_url: str) -> None:
    """0012 fills each agent's usage from its live entries (UTF-8 bytes), on both databases."""
    engine = engine_at(empty_database_url, "0011")
    try:
        now = datetime.now(UTC)
        with Session(engine) as session, session.begin():
            [agent_id] = agents_of_alice(session, "helper")
            session.execute(
                text(
                    "INSERT INTO memory_feeds (agent_id, last_cursor, vectors_version) "
                    "VALUES (:agent, 3, 0)"
                ).bindparams(bindparam("agent", type_=Uuid())),
                {"agent": agent_id},
            )
            for cursor, (key, content, gone) in enumerate(
                [("a", "héllo", None), ("b", "abc", None), ("c", "forgotten", now)], 1
            ):
                session.add(
                    MemoryEntry(
                        id=uuid.uuid4(),
                        agent_id=agent_id,
                        namespace="owner",
                        key=key,
                        description="",
                        content=content,
                        content_sha256="-",
                        source="",
                        created_at=now,
                        updated_at=now,
                        deleted_at=gone,
                        cursor=cursor,
                    )
                )
        upgrade(engine)
        with Session(engine) as session:
            feed = session.get(MemoryFeed, agent_id)
            assert feed is not None
            assert (feed.last_cursor, feed.entries, feed.bytes) == (3, 2, 9)
    finally:
        engine.dispose()
