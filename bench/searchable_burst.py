"""How long after its put is answered a note is searchable by meaning, under a burst of puts:
p50, p99 and the longest, with the embedding queue worked in the `portal serve` process
(its default) and by a `webagents portal worker` beside `portal serve --background-jobs none`.

    .venv/bin/python bench/searchable_burst.py [--bursts 10 30 100] [--rounds 3]

A real `webagents portal serve` (`--embeddings local`) on a throwaway PostgreSQL cluster (or
SQLite: --database sqlite); one agent. Warm first, as a running portal is: a few notes put
and embedded (a worker loads the model at its first batch). Then each round puts a burst of
N short English notes through the HTTP API, one client, each put sent when the last was
answered, and the time each put was answered is kept. Meanwhile this script reads the
database every 10 ms: a note is searchable by meaning from the moment its current vector is
committed (search reads the vectors the queue stored: pgvector's column, or the cache,
which reloads when an agent's vectors change), so the time from its put's answer to the
first read that sees its vector is its delay (to within the 10 ms of the reads). The run
checks at the end that notes of every round are found by a search, by meaning.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
from portal_memory import make_agent, portal_process

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the tests' throwaway PostgreSQL cluster

from sqlalchemy import Engine, Uuid, bindparam, text  # noqa: E402
from tests.portal.databases import PostgresServer, _Cluster  # noqa: E402

from webagents.portal.admin import open_database  # noqa: E402
from webagents.portal.settings import PortalSettings  # noqa: E402

PATH = "/api/storage/memory-scoped"
SUBJECTS = ["my sister", "the landlord", "our dentist", "the team lead", "my neighbour"]
VERBS = ["prefers", "asked about", "cannot stand", "is allergic to", "wants more"]
OBJECTS = ["green tea", "early meetings", "the red bicycle", "peanut sauce", "jazz records"]
PLACES = ["at home", "at work", "on holiday", "in the morning", "on weekends", "at lunch"]


def sentence(n: int) -> str:
    return (
        f"{SUBJECTS[n % 5]} {VERBS[n // 5 % 5]} {OBJECTS[n // 25 % 5]} "
        f"{PLACES[n // 125 % 6]} (note {n})"
    )


class Watcher:
    """Reads, every 10 ms, which notes of the agent have their current vector, and keeps
    the moment each was first seen."""

    def __init__(self, engine: Engine, agent_id: str) -> None:
        self.engine = engine
        self.agent_id = agent_id
        self.seen: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Watcher:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        query = text(
            "SELECT e.key FROM memory_entries e JOIN memory_vectors v ON v.entry_id = e.id "
            "AND v.entry_cursor = e.cursor WHERE e.agent_id = :agent"
        ).bindparams(bindparam("agent", type_=Uuid()))
        while not self._stop.is_set():
            with self.engine.connect() as connection:
                keys = connection.execute(query, {"agent": uuid.UUID(self.agent_id)})
                now = time.perf_counter()
                for (key,) in keys:
                    self.seen.setdefault(str(key), now)
            self._stop.wait(0.01)

    def wait_for(self, keys: list[str], bound: float = 300) -> None:
        deadline = time.perf_counter() + bound
        while any(k not in self.seen for k in keys):
            if time.perf_counter() > deadline:
                missing = [k for k in keys if k not in self.seen]
                raise AssertionError(f"{len(missing)} notes had no vector after {bound} s")
            time.sleep(0.01)


def put(http: httpx.Client, key: str, content: str) -> float:
    body = {
        "namespace": "caller:user1",
        "key": key,
        "content": content,
        "description": "",
        "source": "bench",
        "at": None,
    }
    http.put(PATH, json=body).raise_for_status()
    return time.perf_counter()


def found_by_meaning(http: httpx.Client, key: str, content: str) -> bool:
    # The note's sentence without its number: a search its vector answers.
    asked = content.rsplit(" (", 1)[0]
    params = {"action": "search", "q": asked, "namespace": "caller:user1", "limit": "50"}
    answer = http.get(PATH, params=params)
    answer.raise_for_status()
    return any(e["key"] == key and "meaning" in e["matched"] for e in answer.json()["entries"])


@contextlib.contextmanager
def worker_process(url: str, home: Path) -> Iterator[None]:
    env = {**os.environ, "HOME": str(home), "PYTHONPATH": str(ROOT / "src")}
    command = [str(Path(sys.executable).parent / "webagents"), "portal", "worker"]
    child = subprocess.Popen(
        [*command, "--database", url, "--embeddings", "local"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield
    finally:
        child.terminate()
        child.wait(60)


def batches(started: float, answered: dict[str, float], watcher: Watcher) -> str:
    """Where a round's time went (--detail): the puts' span, and each batch of vectors as it
    was seen committed (the notes one read of the watcher saw first), in ms from the first
    put sent, with its size."""
    commits: dict[float, int] = {}
    for key in answered:
        commits[watcher.seen[key]] = commits.get(watcher.seen[key], 0) + 1
    shown = ", ".join(f"{(at - started) * 1000:.0f}:{n}" for at, n in sorted(commits.items()))
    span = (max(answered.values()) - started) * 1000
    return f"puts answered by {span:.0f} ms; batches (ms:notes) {shown}"


def measure(
    url: str, setup: str, bursts: list[int], rounds: int, work: Path, detail: bool = False
) -> list[str]:
    engine = open_database(PortalSettings(database_url=url))
    key, agent_id = make_agent(engine)
    more = ("--background-jobs", "none") if setup == "portal worker" else ()
    rows = []
    with contextlib.ExitStack() as stack:
        base = stack.enter_context(portal_process(url, work, "local", *more))
        if setup == "portal worker":
            stack.enter_context(worker_process(url, work))
        http = stack.enter_context(
            httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=60)
        )
        watcher = stack.enter_context(Watcher(engine, agent_id))
        warm = [f"warm-{n}" for n in range(3)]
        for n, name in enumerate(warm):
            put(http, name, sentence(n))
        watcher.wait_for(warm)
        serial = 1000
        for size in bursts:
            delays: list[float] = []
            checked = 0
            for r in range(rounds):
                made = [(f"b{size}-{r}-{n}", sentence(serial + n)) for n in range(size)]
                serial += size
                started = time.perf_counter()
                answered = {name: put(http, name, content) for name, content in made}
                watcher.wait_for(list(answered))
                delays += [(watcher.seen[k] - at) * 1000 for k, at in answered.items()]
                if detail:
                    shown = batches(started, answered, watcher)
                    print(f"  {setup}, {size} notes, round {r + 1}: {shown}")
                for name, content in (made[0], made[-1]):
                    assert found_by_meaning(http, name, content), f"{name} not found by meaning"
                    checked += 1
            p50, p99 = np.percentile(delays, 50), np.percentile(delays, 99)
            rows.append(
                f"| {setup} | {size} | {rounds} | {p50:.0f} | {p99:.0f} | {max(delays):.0f} | "
                f"{checked} of {checked} |"
            )
            print(rows[-1], flush=True)
    engine.dispose()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bursts", type=int, nargs="+", default=[10, 30, 100])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--database", choices=["postgresql", "sqlite"], default="postgresql")
    parser.add_argument("--setups", nargs="+", default=["in-process", "portal worker"])
    parser.add_argument(
        "--detail", action="store_true", help="each round's puts and batches, as they were seen"
    )
    args = parser.parse_args()
    print(f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    print(f"load average before: {os.getloadavg()[0]:.2f}", flush=True)
    work = Path(tempfile.mkdtemp(prefix="wa-burst-"))
    rows: list[str] = []
    cluster = _Cluster() if args.database == "postgresql" else None
    server = PostgresServer(cluster.start()) if cluster is not None else None
    try:
        for setup in args.setups:
            url = (
                server.new_database()
                if server is not None
                else f"sqlite:///{work / (setup.replace(' ', '-') + '.db')}"
            )
            rows += measure(url, setup, args.bursts, args.rounds, work, args.detail)
    finally:
        if server is not None and cluster is not None:
            server.drop_all()
            cluster.stop()
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    print(f"\n{args.database}; ms from a put's answer until its vector is stored (searchable)\n")
    print("| embedding queue | burst | rounds | p50 | p99 | longest | found by meaning |")
    print("|---|---:|---:|---:|---:|---:|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
