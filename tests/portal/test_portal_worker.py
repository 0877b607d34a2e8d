"""`webagents portal worker` (issue 23): the background jobs in processes of their own, beside
`webagents portal serve --background-jobs none`. The embedding model is an OpenAI-compatible
endpoint served by the test (worker_helpers.py), so the test sees which process asked to
embed what, and when."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from webagents.portal.db.engine import make_engine, make_sessions
from webagents.portal.memory import retention
from webagents.portal.memory.repository import MemoryStore
from webagents.portal.scope import SystemScope
from webagents.portal.settings import PortalSettings

from .connect_agent import ConnectAgent
from .processes import Child, Served, portal
from .worker_helpers import MODEL, URL, Endpoint, make_agent, start_worker, until


@pytest.fixture
def endpoint() -> Iterator[Endpoint]:
    with Endpoint() as made:
        yield made


@pytest.mark.e2e  # runs the installed webagents command
@pytest.mark.whole_system  # the command's seam, on PostgreSQL alone (tests/portal/whole_system.py)
def test_p5_portal_worker_embeds_what_a_serve_without_background_jobs_keeps(
    tmp_path: Path, fresh_database_url: str, endpoint: Endpoint
) -> None:
    database = fresh_database_url
    served = Served(
        tmp_path,
        "--embeddings",
        MODEL,
        "--background-jobs",
        "none",
        "--database",
        database,
        env={"OPENAI_BASE_URL": endpoint.url},
    )
    try:
        assert "background jobs: none here (run `webagents portal worker` beside it)" in (
            served.output
        )
        agent, agent_id = make_agent(tmp_path, served, database)
        with httpx.Client(base_url=served.url, headers=agent, params={"agentId": agent_id}) as http:
            note = {"namespace": "owner", "key": "npets", "content": "a puppy named rex"}
            assert http.put(URL, json=note).status_code == 200

            def matched() -> list[tuple[str, list[str]]]:
                found = http.get(
                    URL, params={"action": "search", "q": "dog", "namespace": "owner"}
                ).json()
                return [(e["key"], e["matched"]) for e in found["entries"]]

            assert matched() == []  # no process embeds: "dog" finds the puppy by meaning only
            worker = start_worker(tmp_path, endpoint, database)
            try:
                assert until(lambda: matched() == [("npets", ["meaning"])]), matched()
            finally:
                assert worker.stop() == 0
    finally:
        served.stop()
    assert endpoint.texts == ["npets\n\na puppy named rex"]
    assert "webagents portal worker: stopped; embedded 1 note" in worker.output


@pytest.mark.e2e  # runs the installed webagents command
def test_p5_two_portal_workers_on_postgresql_share_the_embedding_and_none_embeds_twice(
    tmp_path: Path, fresh_database_url: str
) -> None:
    if not fresh_database_url.startswith("postgresql"):
        pytest.skip("several portal workers need PostgreSQL (SQLite: one process)")
    database = fresh_database_url
    served = Served(tmp_path, "--background-jobs", "none", "--database", database)
    try:
        agent, agent_id = make_agent(tmp_path, served, database)
        with httpx.Client(base_url=served.url, headers=agent, params={"agentId": agent_id}) as http:
            for n in range(100):
                note = {"namespace": "owner", "key": f"n{n:03}", "content": f"a car {n}"}
                assert http.put(URL, json=note).status_code == 200
    finally:
        served.stop()
    with Endpoint(meet=True) as endpoint:
        workers = [start_worker(tmp_path, endpoint, database) for _ in range(2)]
        try:
            assert until(lambda: len(endpoint.texts) >= 100), len(endpoint.texts)
        finally:
            stopped = [worker.stop() for worker in workers]
    assert stopped == [0, 0]
    assert endpoint.met is True  # the two embedded at the same moment
    assert sorted(endpoint.texts) == sorted(f"n{n:03}\n\na car {n}" for n in range(100))
    done = [int(worker.wait_for(r"stopped; embedded (\d+) notes?").group(1)) for worker in workers]
    assert sum(done) == 100 and min(done) > 0, done


@pytest.mark.e2e  # runs the installed webagents command
def test_p5_on_sqlite_one_process_runs_the_background_jobs(
    tmp_path: Path, fresh_database_url: str
) -> None:
    """A second `portal worker` is refused with what to do; a second `portal serve` (a SQLite
    portal may have several) stands by, and takes the jobs over when the first one stops."""
    if not fresh_database_url.startswith("sqlite"):
        pytest.skip("the one-process rule is SQLite's (PostgreSQL: any number of workers)")
    database = ("--database", fresh_database_url)
    first = Served(tmp_path, *database)
    second: Served | None = None
    try:
        assert "background jobs: in this process (embedding notes, memory retention)" in (
            first.output
        )
        refused = portal(tmp_path, "worker", "--embeddings", "none", *database)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert refused.stderr.strip().endswith(
            "another process runs this SQLite portal's background jobs already (`webagents "
            "portal serve` runs them unless started with --background-jobs none); on SQLite "
            "one process runs them: stop the other, or use PostgreSQL for several workers"
        ), refused.stderr
        assert "running" not in refused.stdout
        second = Served(tmp_path, *database)
        assert (
            "background jobs: another process runs them now (a portal worker or serve); this "
            "one takes them over if it stops"
        ) in second.output
        first.stop()  # SIGTERM
        second.wait_for("background jobs: the other process stopped; running them here")
    finally:
        first.stop()
        if second is not None:
            second.stop()


def _keep_owner_notes_for(days: int, database: str, agent_id: str) -> None:
    """The owner's retention rule for `owner`, as the owner's memory page sets it."""
    engine = make_engine(PortalSettings(database_url=database))
    try:
        with make_sessions(engine)() as db:
            page = SystemScope("test: the owner's retention form")
            retention.set_rule(MemoryStore.for_system(db, page, uuid.UUID(agent_id)), "owner", days)
            db.commit()
    finally:
        engine.dispose()


@pytest.mark.e2e  # runs the installed webagents command
def test_p12_a_portal_workers_retention_is_told_to_the_agents_connections_at_once(
    tmp_path: Path, fresh_database_url: str
) -> None:
    """The worker serves no connection: the serving process that holds the agent's is told
    over PostgreSQL's bus, and tells the agent (`memory_changed`), as for the API's writes."""
    if not fresh_database_url.startswith("postgresql"):
        pytest.skip("a worker tells the serving processes over PostgreSQL (SQLite: next sync)")
    database = fresh_database_url
    served = Served(tmp_path, "--background-jobs", "none", "--database", database)
    try:
        agent, agent_id = make_agent(tmp_path, served, database)
        forty_days_ago = (datetime.now(UTC) - timedelta(days=40)).isoformat()
        with httpx.Client(base_url=served.url, headers=agent, params={"agentId": agent_id}) as http:
            note = {"namespace": "owner", "key": "old", "content": "expired", "at": forty_days_ago}
            assert http.put(URL, json=note).status_code == 200
            _keep_owner_notes_for(30, database, agent_id)
            connected = ConnectAgent(served.url, agent["Authorization"].removeprefix("Bearer "))
            try:
                connected.wait_for("hellos")
                worker = Child(
                    tmp_path,
                    "portal",
                    "worker",
                    "--embeddings",
                    "none",
                    "--database",
                    database,
                    env={retention.SWEEP_SECONDS_ENV: "0.2"},
                )
                try:
                    connected.wait_for("memory")  # before: only at the agent's next sync
                finally:
                    assert worker.stop() == 0
            finally:
                connected.stop()
            found = http.get(URL, params={"action": "get", "namespace": "owner", "key": "old"})
            assert found.json() == {"entry": None}, found.text
            pulled = http.get(URL, params={"action": "sync"}).json()
    finally:
        served.stop()
    (removal,) = [line for line in pulled["lines"] if line["op"] == "delete"]
    assert (removal["key"], removal["by"] if "by" in removal else "retention") == (
        "old",
        "retention",
    )
    assert connected.seen.memory[-1] == {"type": "memory_changed", "cursor": pulled["cursor"]}
