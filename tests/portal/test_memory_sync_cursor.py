"""The sync cursor is an opaque string both ways (SPEC P5; portal/memory/schemas.cursor_of,
portal_link/memory_sync/pull.py): `GET action=sync` answers it as a string (the platform's SDK
keeps nothing else), takes it back as it came, refuses one it never gave with a 400 that
says what to send; our client keeps what it was given, and the cursors older versions saved
in state.json (integers) keep working. On SQLite and PostgreSQL."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from tests.memory_helpers import memory_agent
from webagents.portal.memory import service
from webagents.portal.memory.repository import MemoryStore
from webagents.portal.settings import PortalSettings
from webagents.portal_link.client import PortalClient
from webagents.portal_link.memory_sync.sync import PortalSync

from .conftest import make_client
from .memory_helpers import Published, publish

PATH = "/api/storage/memory-scoped"


@pytest.fixture
def agent(db: Session) -> Published:
    return publish(db)


def _notes(db: Session, agent: Published, count: int) -> None:
    """`count` notes in the portal (cursors 1..count), as the owner's pages write them."""
    store = MemoryStore.for_agent(db, agent.scope)
    for n in range(1, count + 1):
        service.put(store, namespace="owner", key=f"note-{n}", content=f"Note {n}.", by="agent")
    db.commit()


def test_p5_the_sync_cursor_is_a_string_taken_back_as_it_came(
    client: TestClient, db: Session, agent: Published
) -> None:
    _notes(db, agent, 3)
    first = client.get(
        PATH, headers=agent.headers, params={"action": "sync", "namespace": "owner", "limit": 2}
    )
    page = first.json()
    assert (first.status_code, page["cursor"], page["more"]) == (200, "2", True)
    assert [(line["key"], line["cursor"]) for line in page["lines"]] == [
        ("note-1", "1"),
        ("note-2", "2"),
    ]
    rest = client.get(
        PATH,
        headers=agent.headers,
        params={"action": "sync", "namespace": "owner", "since": page["cursor"]},
    ).json()
    assert ([line["key"] for line in rest["lines"]], rest["cursor"], rest["more"]) == (
        ["note-3"],
        "3",
        False,
    )
    done = client.get(
        PATH, headers=agent.headers, params={"action": "sync", "since": rest["cursor"]}
    )
    assert done.json() == {"lines": [], "cursor": "3", "more": False}
    # No cursor, an empty one: from the start (a client's first pull).
    for start in ({}, {"since": ""}):
        again = client.get(PATH, headers=agent.headers, params={"action": "sync", **start})
        assert [line["key"] for line in again.json()["lines"]] == ["note-1", "note-2", "note-3"]


@pytest.mark.parametrize("since", ["abc", "-1", "1.5", " 2", "2 ", "\uff11", "9" * 20, "null"])
def test_p5_a_cursor_the_store_never_gave_is_a_400_that_says_what_to_send(
    client: TestClient, agent: Published, since: str
) -> None:
    answer = client.get(PATH, headers=agent.headers, params={"action": "sync", "since": since})
    assert (answer.status_code, answer.json()) == (
        400,
        {
            "error": {
                "message": "since is the cursor of an earlier sync answer, sent back as it came "
                "(a string): send that, or leave since out to pull from the start "
                f"(not {since!r})",
                "type": "invalid_request_error",
                "param": None,
                "code": "bad_cursor",
            }
        },
    )


class _Portal:
    """The portal's app on the test's database as the agent's sync reaches it, with the
    `since` of every pull it was sent."""

    def __init__(
        self, settings: PortalSettings, engine: Engine, db: Session, agent: Published
    ) -> None:
        self.settings, self.engine, self.db, self.agent = settings, engine, db, agent
        self.sent: list[str | None] = []

    def client(self) -> PortalClient:
        client = PortalClient("http://testserver", self.agent.key)
        client._http.close()
        http = make_client(self.settings, self.engine, self.db)
        http.headers["Authorization"] = f"Bearer {self.agent.key}"
        http.event_hooks["request"] = [self._seen]
        client._http = http
        return client

    def _seen(self, request: Any) -> None:
        if request.url.params.get("action") == "sync" and request.method == "GET":
            self.sent.append(request.url.params.get("since"))


@pytest.fixture
def portal(
    settings: PortalSettings,
    migrated_engine: Engine,
    db: Session,
    agent: Published,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[_Portal]:
    monkeypatch.setenv("WEBAGENTS_AGENT_TOKEN", agent.key)
    monkeypatch.setattr(PortalSync, "start", lambda self: None)  # rounds are run by the test
    yield _Portal(settings, migrated_engine, db, agent)


def _old_state(folder: Path, cursors: dict[str, Any]) -> None:
    """state.json as versions before the string cursor wrote it."""
    sync = folder / ".webagents" / "portal-sync"
    sync.mkdir(parents=True, mode=0o700)
    state = {"offset": 0, "cursors": cursors, "bases": {}, "last_sync": None, "conflicts": []}
    path = sync / "state.json"
    path.write_text(json.dumps(state))
    os.chmod(path, 0o600)


def _kept_cursors(folder: Path) -> Any:
    return json.loads((folder / ".webagents" / "portal-sync" / "state.json").read_text())["cursors"]


@pytest.mark.parametrize("saved", [2, "2"])
def test_p7_a_cursor_an_older_version_saved_in_state_json_keeps_working(
    tmp_path: Path, db: Session, agent: Published, portal: _Portal, saved: Any
) -> None:
    _notes(db, agent, 4)
    folder = tmp_path / "a"
    _old_state(folder, {"*": saved})
    _, skill = memory_agent(folder, portal=True)
    assert skill.sync is not None
    skill.sync.connect = portal.client
    assert skill.sync.sync_round() is True
    # The pull went on after the saved cursor: notes 1 and 2 were pulled before, not again.
    assert sorted(p.name for p in (folder / ".webagents" / "memory" / "owner").glob("*.md")) == [
        "note-3.md",
        "note-4.md",
    ]
    assert portal.sent == ["2"]
    assert _kept_cursors(folder) == {"*": "4"}


def test_p7_our_client_keeps_the_portals_cursor_as_a_string_and_sends_it_back(
    tmp_path: Path, db: Session, agent: Published, portal: _Portal
) -> None:
    folder = tmp_path / "a"
    _, skill = memory_agent(folder, portal=True)
    assert skill.sync is not None
    skill.sync.connect = portal.client
    _notes(db, agent, 2)
    assert skill.sync.sync_round() is True
    assert _kept_cursors(folder) == {"*": "2"}
    service.put(
        MemoryStore.for_agent(db, agent.scope),
        namespace="owner",
        key="later",
        content="Later.",
        by="agent",
    )
    db.commit()
    assert skill.sync.sync_round() is True
    assert portal.sent == [None, "2"]
    assert _kept_cursors(folder) == {"*": "3"}
    assert (folder / ".webagents" / "memory" / "owner" / "later.md").exists()
