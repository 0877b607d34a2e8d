"""A get at the store layer, taken apart: per `service.get` with its key check, in one reading
session as the API's get has it, the Python function calls (cProfile: the same on a busy
machine as on a quiet one, unlike the time), the statements SQLAlchemy sends, on PostgreSQL
the round trips to the server (libpq's trace: every answer the server ends, the driver's
BEGIN, COMMIT and the pool's ping included; like the calls, the same at any load), and the
median time; then the calls of each part (the key check, the entry's read, the session's
begin and end).

    .venv/bin/python bench/memory_get.py [--repeat 300]

On SQLite (a file) and on a throwaway PostgreSQL cluster (the tests'), 200 notes of
bench/portal_memory.py's, one agent.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import platform
import pstats
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from portal_memory import UNBOUNDED, make_agent, notes, store_of

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the tests' throwaway PostgreSQL cluster

from sqlalchemy import Engine, event  # noqa: E402
from tests.portal.databases import PostgresServer, _Cluster  # noqa: E402

from webagents.portal.accounts.auth import agent_key_scope_read_only  # noqa: E402
from webagents.portal.admin import open_database  # noqa: E402
from webagents.portal.db.engine import make_reading_sessions  # noqa: E402
from webagents.portal.memory import service  # noqa: E402
from webagents.portal.memory.repository import MemoryStore  # noqa: E402
from webagents.portal.settings import PortalSettings  # noqa: E402


def calls(fn: Callable[[], Any], repeat: int = 200) -> float:
    """Python function calls per call of `fn`."""
    for _ in range(30):
        fn()
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(repeat):
        fn()
    profile.disable()
    return pstats.Stats(profile).total_calls / repeat  # type: ignore[attr-defined,no-any-return]


def round_trips(engine: Engine, fn: Callable[[], Any], repeat: int = 50) -> float:
    """Round trips to PostgreSQL per call of `fn`: the server's ReadyForQuery messages (the
    end of each answer) in libpq's trace of every connection `fn` takes from the pool, each
    traced to a file of its own; the calls before the trace of a connection began (the one
    that took it) are left out by counting only after a first call."""
    traced: dict[Any, Any] = {}

    def trace(dbapi_connection: Any, *_: Any) -> None:
        pgconn = dbapi_connection.pgconn
        if pgconn not in traced:
            traced[pgconn] = tempfile.TemporaryFile("w+")
            pgconn.trace(traced[pgconn].fileno())

    def answers() -> int:
        count = 0
        for pgconn, log in traced.items():
            pgconn.untrace()  # flushes the trace
            log.seek(0)
            count += sum(1 for line in log if "\tReadyForQuery\t" in line)
            log.seek(0, os.SEEK_END)
            pgconn.trace(log.fileno())
        return count

    event.listen(engine.pool, "checkout", trace)
    fn()
    before = answers()
    for _ in range(repeat):
        fn()
    trips = (answers() - before) / repeat
    event.remove(engine.pool, "checkout", trace)
    for pgconn, log in traced.items():
        pgconn.untrace()
        log.close()
    return trips


def measure(url: str, label: str, repeat: int) -> None:
    engine = open_database(PortalSettings(database_url=url))
    key, _ = make_agent(engine)
    with store_of(engine, key) as store:
        for note in notes(200):
            service.put(
                store,
                namespace=note.namespace,
                key=note.key,
                content=note.content,
                by=service.BY_AGENT,
                quotas=UNBOUNDED,
            )
    reading = make_reading_sessions(engine)

    def get() -> None:
        with reading() as db, db.begin():
            store = MemoryStore.for_agent(db, agent_key_scope_read_only(db, f"Bearer {key}"))
            assert service.get(store, "caller:user7", "note-7") is not None

    sent: list[str] = []

    def seen(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        sent.append(" ".join(statement.split()[:2]))

    event.listen(engine, "before_cursor_execute", seen)
    get()
    event.remove(engine, "before_cursor_execute", seen)
    made = calls(get)
    trips = f"{round_trips(engine, get):.0f}" if url.startswith("postgresql") else ""
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        get()
        times.append(time.perf_counter() - began)
    print(
        f"| {label} | whole get | {made:.0f} | {trips} | {statistics.median(times) * 1000:.2f} "
        f"| {'; '.join(sent)} |"
    )
    with reading() as db, db.begin():
        store = MemoryStore.for_agent(db, agent_key_scope_read_only(db, f"Bearer {key}"))
        parts = {
            "the key check (agent_key_scope_read_only)": lambda: agent_key_scope_read_only(
                db, f"Bearer {key}"
            ),
            "the entry's read (store.live_entry)": lambda: store.live_entry(
                "caller:user7", "note-7"
            ),
            "service.get (the read and EntryOut)": lambda: service.get(
                store, "caller:user7", "note-7"
            ),
        }
        for name, fn in parts.items():
            print(f"| {label} | {name} | {calls(fn):.0f} | | | |")

    def lifecycle() -> None:
        with reading() as db, db.begin():
            db.connection()

    print(
        f"| {label} | a reading session: begin, connection, commit | {calls(lifecycle):.0f} | | | |"
    )
    engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=300)
    args = parser.parse_args()
    print(f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    print(f"load average before: {os.getloadavg()[0]:.2f}", flush=True)
    print("| database | what | Python calls | round trips | median ms | statements |")
    print("|---|---|---:|---:|---:|---|")
    work = Path(tempfile.mkdtemp(prefix="wa-get-"))
    measure(f"sqlite:///{work / 'get.db'}", "SQLite", args.repeat)
    cluster = _Cluster()
    server = PostgresServer(cluster.start())
    try:
        measure(server.new_database(), "PostgreSQL", args.repeat)
    finally:
        server.drop_all()
        cluster.stop()
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
