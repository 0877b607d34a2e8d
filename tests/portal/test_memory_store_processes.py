"""The memory store with real commits, on SQLite and PostgreSQL: the embedding worker thread
of a running app, writers of one agent at once (cursors in commit order, a reader that pages
meanwhile misses nothing), and a real `webagents portal serve` process over HTTP."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from webagents.portal.admin import open_database, transaction
from webagents.portal.app import create_app
from webagents.portal.db.engine import make_sessions
from webagents.portal.memory import service
from webagents.portal.memory.repository import MemoryStore
from webagents.portal.settings import PortalSettings

from .account_helpers import new_user_key
from .memory_helpers import Published, SynonymEmbedder, publish
from .processes import Served, portal

URL = "/api/storage/memory-scoped"


@pytest.fixture
def engine(fresh_database_url: str) -> Iterator[Engine]:
    made = open_database(PortalSettings(database_url=fresh_database_url))
    yield made
    made.dispose()


def _published(engine: Engine) -> Published:
    with make_sessions(engine)() as session:
        return publish(session)  # it commits


def _until(check: object, tries: int = 400) -> bool:
    """Whether `check()` came true within `tries` looks (a bounded wait, not a timing)."""
    for _ in range(tries):
        if check():  # type: ignore[operator]
            return True
        time.sleep(0.05)
    return False


def test_p5_the_worker_embeds_notes_in_the_background_and_search_finds_them(
    engine: Engine, fresh_database_url: str
) -> None:
    agent = _published(engine)
    embedder = SynonymEmbedder()
    app = create_app(
        PortalSettings(database_url=fresh_database_url), engine=engine, embedder=embedder
    )
    with TestClient(app) as api:
        put = api.put(
            URL,
            headers=agent.headers,
            json={"namespace": "caller:bob", "key": "pets", "content": "a puppy named rex"},
        )
        assert put.status_code == 200, put.text
        params = {"action": "search", "q": "dog", "namespace": "caller:bob"}

        def found_by_meaning() -> bool:
            entries = api.get(URL, headers=agent.headers, params=params).json()["entries"]
            return [(e["key"], e["matched"]) for e in entries] == [("pets", ["meaning"])]

        assert _until(found_by_meaning), "the worker never embedded the note"
    assert ["pets\n\na puppy named rex"] in embedder.calls


def test_p5_concurrent_writers_get_cursors_in_commit_order_and_a_reader_misses_none(
    engine: Engine,
) -> None:
    agent = _published(engine)
    writers, per_writer = 4, 15
    seen: dict[str, int] = {}
    done = threading.Event()
    failures: list[BaseException] = []

    def write(writer: int) -> None:
        try:
            for n in range(per_writer):
                with transaction(engine) as session:
                    store = MemoryStore.for_agent(session, agent.scope)
                    service.put(
                        store,
                        namespace="owner",
                        key=f"w{writer}-{n}",
                        content=f"{writer}/{n}",
                        by=service.BY_AGENT,
                    )
        except BaseException as exc:  # reported below
            failures.append(exc)

    def read() -> None:
        cursor = 0
        while True:
            finished = done.is_set()
            with transaction(engine) as session:
                page = service.changes(MemoryStore.for_agent(session, agent.scope), None, cursor)
            for line in page.lines:
                seen[line.key] = line.cursor
            cursor = page.cursor
            if finished and not page.more:
                return

    reader = threading.Thread(target=read)
    reader.start()
    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    done.set()
    reader.join()
    assert failures == []
    expected = {f"w{w}-{n}" for w in range(writers) for n in range(per_writer)}
    assert set(seen) == expected
    assert sorted(seen.values()) == list(range(1, writers * per_writer + 1))


@pytest.mark.e2e  # runs the installed webagents command
def test_p5_a_served_portal_keeps_and_finds_an_agents_notes(
    tmp_path: Path, fresh_database_url: str, served: Served
) -> None:
    user_key = new_user_key(fresh_database_url, "alice")
    with httpx.Client(base_url=served.url) as http:
        made = http.post(
            "/api/agents",
            headers={"Authorization": f"Bearer {user_key}"},
            json={"name": "helper"},
        )
        assert made.status_code == 201, made.text
        agent = {"Authorization": f"Bearer {made.json()['rawApiKey']}"}
        agent_id = made.json()["agent"]["id"]
        put = http.put(
            URL,
            headers=agent,
            params={"agentId": agent_id},
            json={"namespace": "caller:bob", "key": "prefs", "content": "likes green tea"},
        )
        assert put.status_code == 200, put.text
        found = http.get(
            URL,
            headers=agent,
            params={"action": "search", "q": "tea", "namespace": ["caller:bob", "owner"]},
        ).json()
        assert [(e["key"], e["matched"]) for e in found["entries"]] == [("prefs", ["text"])]
        assert found["semantic"] == "off"
        synced = http.get(URL, headers=agent, params={"action": "sync", "since": 0}).json()
        assert [(line["op"], line["key"], line["cursor"]) for line in synced["lines"]] == [
            ("put", "prefs", "1")
        ]
        refused = http.get(
            URL,
            headers={"Authorization": f"Bearer {user_key}"},
            params={"action": "sync"},
        )
        assert (refused.status_code, refused.json()["error"]["code"]) == (
            401,
            "agent_key_required",
        )
    assert "embeddings: none (semantic search off)" in served.output


@pytest.mark.e2e  # runs the installed webagents command
def test_p5_portal_serve_refuses_an_unknown_embeddings_choice(
    tmp_path: Path, fresh_database_url: str
) -> None:
    done = portal(tmp_path, "serve", "--embeddings", "bogus", "--database", fresh_database_url)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "bogus" in done.stderr
    assert "serving at" not in done.stdout
