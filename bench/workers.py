"""Embedding throughput of `webagents portal worker` processes sharing one PostgreSQL
portal's queue: 1, 2, ... workers, the same notes each time.

    .venv/bin/python bench/workers.py [--notes 2000] [--workers 1 2 3] [--agents 4]

The notes (short English sentences, spread over `--agents` agents and their callers'
namespaces) are put through the store layer once; for each count of workers every vector is
removed, the workers are started (`--embeddings local`, each a process of its own), and the
time is taken from their start until every note has its vector. The model's load is in each
run (a worker loads it at its first batch), as it is when a worker starts. Workers claim
their batches (AcrossAgents.claim), so the sum of the notes they say they embedded is the
count of notes: the run checks it.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the tests' throwaway PostgreSQL cluster

from sqlalchemy import func, select  # noqa: E402
from tests.portal.databases import PostgresServer, _Cluster  # noqa: E402

from webagents.portal import admin  # noqa: E402
from webagents.portal.accounts.auth import agent_key_scope  # noqa: E402
from webagents.portal.admin import open_database  # noqa: E402
from webagents.portal.agents import service as agents  # noqa: E402
from webagents.portal.agents.schemas import AgentIn  # noqa: E402
from webagents.portal.db.tables import MemoryVector  # noqa: E402
from webagents.portal.memory import service  # noqa: E402
from webagents.portal.memory.repository import MemoryStore  # noqa: E402
from webagents.portal.settings import PortalSettings  # noqa: E402

SUBJECTS = ["my sister", "the landlord", "our dentist", "the team lead", "my neighbour"]
VERBS = ["prefers", "asked about", "cannot stand", "is allergic to", "wants more"]
OBJECTS = ["green tea", "early meetings", "the red bicycle", "peanut sauce", "jazz records"]
_DONE = re.compile(r"stopped; embedded (\d+) notes?")


def put_notes(url: str, count: int, agents_count: int) -> None:
    engine = open_database(PortalSettings(database_url=url))
    keys = []
    for n in range(agents_count):
        scope = admin.add_user(engine, f"bench{n}{uuid.uuid4().hex[:4]}", "bench-password-1234")
        with admin.transaction(engine) as db:
            keys.append(agents.create_agent(db, scope, AgentIn(name=f"bench-{n}")).rawApiKey)
    for n in range(count):
        with admin.transaction(engine) as db:
            store = MemoryStore.for_agent(db, agent_key_scope(db, f"Bearer {keys[n % len(keys)]}"))
            sentence = f"{SUBJECTS[n % 5]} {VERBS[n // 5 % 5]} {OBJECTS[n // 25 % 5]} (note {n})"
            service.put(
                store,
                namespace=f"caller:user{n % 50}",
                key=f"note-{n}",
                content=sentence,
                by=service.BY_AGENT,
            )
    engine.dispose()


def vectors(url: str) -> int:
    engine = open_database(PortalSettings(database_url=url))
    with admin.transaction(engine) as db:
        found = int(db.scalar(select(func.count()).select_from(MemoryVector)) or 0)
    engine.dispose()
    return found


def clear_vectors(url: str) -> None:
    engine = open_database(PortalSettings(database_url=url))
    with admin.transaction(engine) as db:
        db.query(MemoryVector).delete()
    engine.dispose()


def run(url: str, workers: int, count: int, home: Path) -> tuple[float, list[int]]:
    clear_vectors(url)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "WEBAGENTS_"))}
    env["WEBAGENTS_HOME"] = str(home)
    command = [str(Path(sys.executable).with_name("webagents")), "portal", "worker"]
    began = time.perf_counter()
    started = [
        subprocess.Popen(
            [*command, "--embeddings", "local", "--database", url],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(workers)
    ]
    while vectors(url) < count:
        time.sleep(0.1)
    took = time.perf_counter() - began
    done = []
    for child in started:
        child.terminate()
        out, _ = child.communicate(timeout=60)
        found = _DONE.search(out)
        if found is None:
            raise SystemExit(f"a worker said no count:\n{out}")
        done.append(int(found.group(1)))
    return took, done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--notes", type=int, default=2000)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--agents", type=int, default=4)
    args = parser.parse_args()
    print(f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    cluster = _Cluster()
    server = PostgresServer(cluster.start())
    try:
        url = server.new_database()
        put_notes(url, args.notes, args.agents)
        home = Path(tempfile.mkdtemp(prefix="wa-bench-workers-"))
        print("| workers | seconds | notes/s | embedded by each |")
        print("|---:|---:|---:|---|")
        for count in args.workers:
            took, done = run(url, count, args.notes, home)
            assert sum(done) == args.notes, (done, args.notes)
            print(
                f"| {count} | {took:.1f} | {args.notes / took:.0f} | {', '.join(map(str, done))} |"
            )
    finally:
        server.drop_all()
        cluster.stop()
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
