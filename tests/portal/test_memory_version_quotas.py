"""The memory store's version quotas (issue 21; portal/memory/quotas.py), on SQLite and
PostgreSQL: every version a note keeps counts (forgotten notes' included), so neither
overwriting a note nor writing notes and forgetting them grows the store past a quota, as
they did while only the live notes counted; pruning and retention give the bytes back, and
0013 counts the versions already kept."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, Uuid, bindparam, func, select, text
from sqlalchemy.orm import Session

from webagents.portal.db.migrate import upgrade
from webagents.portal.db.tables import MemoryFeed, MemoryVersion
from webagents.portal.memory import retention
from webagents.portal.memory.repository import MemoryStore
from webagents.portal.memory.retention import Swept
from webagents.portal.settings import PortalSettings

from .memory_helpers import Published, publish, publish_for
from .quota_helpers import URL, agents_of_alice, engine_at, limited_api, put_note, refusal

KEPT = (
    "nothing was stored: the owner can set a retention period for the namespace on the "
    "agent's memory page (versions and forgotten notes older than it go), or ask the "
    "portal's administrator to raise"
)


@pytest.fixture
def small(settings: PortalSettings, migrated_engine: Engine, db: Session) -> Iterator[TestClient]:
    """The API with room for 20 bytes of versions an agent (the other quotas as they are)."""
    yield from limited_api(settings, migrated_engine, db, agent_version_bytes=20)


def _forget(api: TestClient, agent: Published, key: str) -> Any:
    return api.delete(URL, headers=agent.headers, params={"namespace": "owner", "key": key}).json()


def _usage(db: Session, agent: Published) -> tuple[int, int, int]:
    """(live entries, their bytes, version bytes) as the feed row counts them."""
    found = db.execute(
        select(MemoryFeed.entries, MemoryFeed.bytes, MemoryFeed.version_bytes).where(
            MemoryFeed.agent_id == agent.scope.agent_id
        )
    ).one()
    return (int(found[0]), int(found[1]), int(found[2]))


def _versions(db: Session, agent: Published) -> list[tuple[str, str, str]]:
    """The versions kept, oldest first: (key, op, content)."""
    rows = db.execute(
        select(MemoryVersion.key, MemoryVersion.op, MemoryVersion.content)
        .where(MemoryVersion.agent_id == agent.scope.agent_id)
        .order_by(MemoryVersion.cursor)
    )
    return [(str(k), str(op), str(c)) for k, op, c in rows]


def test_p5_overwriting_one_note_meets_the_agents_version_bytes_quota(
    small: TestClient, db: Session
) -> None:
    agent = publish(db)
    assert [put_note(small, agent, "plan", f"v{n:04}").status_code for n in range(4)] == [200] * 4
    refused = put_note(small, agent, "plan", "v0004")  # no larger: the live bytes do not grow
    assert (refused.status_code, refused.json(), "retry-after" in refused.headers) == (
        429,
        refusal(
            "this note's version would bring the versions this agent's notes keep in the "
            "portal (forgotten notes' included) to 25 bytes, over the 20 bytes it may keep; "
            f"{KEPT} --memory-agent-version-bytes",
            "agent_version_bytes_quota",
            "--memory-agent-version-bytes",
        ),
        False,
    )
    assert (_usage(db, agent), _versions(db, agent)) == (
        (1, 5, 20),
        [("plan", "put", f"v{n:04}") for n in range(4)],
    )


def test_p5_writing_and_forgetting_notes_meets_the_agents_version_bytes_quota(
    small: TestClient, db: Session
) -> None:
    agent = publish(db)
    for key in ("a", "b"):
        assert put_note(small, agent, key, "12345").status_code == 200
        assert _forget(small, agent, key) == {"forgotten": True}  # never refused
    assert _usage(db, agent) == (0, 0, 20)  # nothing live, the forgotten text kept twice each
    refused = put_note(small, agent, "c", "1")
    assert (refused.status_code, refused.json()["error"]["code"]) == (
        429,
        "agent_version_bytes_quota",
    )
    assert (_usage(db, agent), _versions(db, agent)) == (
        (0, 0, 20),
        [(key, op, "12345") for key in ("a", "b") for op in ("put", "delete")],
    )


def test_p5_a_users_agents_share_the_users_version_bytes_quota(
    settings: PortalSettings, migrated_engine: Engine, db: Session
) -> None:
    first = publish(db)
    second = publish_for(db, first.owner, "second")
    stranger = publish(db, owner="bob", agent="strangers")
    for api in limited_api(settings, migrated_engine, db, user_version_bytes=12):
        assert put_note(api, first, "a", "1234567890").status_code == 200
        refused = put_note(api, second, "a", "123")
        assert (refused.status_code, refused.json()) == (
            429,
            refusal(
                "this note's version would bring the versions that the notes of this agent's "
                "owner's agents keep in the portal (forgotten notes' included) to 13 bytes, "
                f"over the 12 bytes one user's agents may keep; {KEPT} "
                "--memory-user-version-bytes",
                "user_version_bytes_quota",
                "--memory-user-version-bytes",
            ),
        )
        assert put_note(api, second, "a", "12").status_code == 200
        assert put_note(api, stranger, "a", "1234567890").status_code == 200
    assert (_usage(db, first), _usage(db, second)) == ((1, 10, 10), (1, 2, 2))


def test_p6_dropped_versions_give_their_bytes_back_pruned_or_by_retention(
    settings: PortalSettings, migrated_engine: Engine, db: Session
) -> None:
    agent = publish(db)
    for api in limited_api(
        settings, migrated_engine, db, agent_version_bytes=12, versions_per_entry=2
    ):
        for n in range(5):  # only the newest 2 versions are kept, so only they count
            assert put_note(api, agent, "plan", f"v{n}").status_code == 200
        assert _usage(db, agent) == (1, 2, 4)
        assert put_note(api, agent, "old", "12345").status_code == 200
        assert _forget(api, agent, "old") == {"forgotten": True}
        assert _usage(db, agent) == (1, 2, 14)
        assert put_note(api, agent, "new", "1").status_code == 429
        # The owner's retention of the namespace removes the forgotten note's versions.
        retention.set_rule(MemoryStore.for_agent(db, agent.scope), "owner", 1)
        later = datetime.now(UTC) + timedelta(days=1, hours=1)
        swept = retention.sweep(db, later)
        db.commit()
        # The live note, older than the period, goes too, with a version that keeps its
        # text (to restore it): that version is all that is left, and all that counts.
        assert swept == {agent.scope.agent_id: Swept([("owner", "plan")], versions=4)}
        assert (_usage(db, agent), _versions(db, agent)) == (
            (0, 0, 2),
            [("plan", "delete", "v4")],
        )
        assert put_note(api, agent, "new", "1").status_code == 200


def test_p5_the_version_bytes_migration_counts_the_versions_already_kept(
    empty_database_url: str,
) -> None:
    """0013 fills each agent's version bytes from its versions (UTF-8 bytes), on both
    databases."""
    engine = engine_at(empty_database_url, "0012")
    try:
        now = datetime.now(UTC)
        with Session(engine) as session, session.begin():
            ids = agents_of_alice(session, "a", "b")
            for agent in ids:  # the row as 0012 has it: no version_bytes yet
                session.execute(
                    text(
                        "INSERT INTO memory_feeds (agent_id, last_cursor, vectors_version, "
                        "entries, bytes) VALUES (:agent, 3, 0, 0, 0)"
                    ).bindparams(bindparam("agent", type_=Uuid())),
                    {"agent": agent},
                )
            entry = uuid.uuid4()
            for cursor, (op, content) in enumerate(
                [("put", "héllo"), ("put", "abc"), ("delete", "abc")], 1
            ):
                session.add(
                    MemoryVersion(
                        id=uuid.uuid4(),
                        agent_id=ids[0],
                        entry_id=entry,
                        namespace="owner",
                        key="k",
                        op=op,
                        description="",
                        content=content,
                        content_sha256="-",
                        source="",
                        at=now,
                        by="agent",
                        cursor=cursor,
                    )
                )
        upgrade(engine)
        with Session(engine) as session:
            counted = session.execute(
                select(MemoryFeed.agent_id, MemoryFeed.version_bytes).where(
                    MemoryFeed.agent_id.in_(ids)
                )
            ).all()
            assert {agent: int(size) for agent, size in counted} == {ids[0]: 12, ids[1]: 0}
            assert session.scalar(select(func.count()).select_from(MemoryVersion)) == 3
    finally:
        engine.dispose()
