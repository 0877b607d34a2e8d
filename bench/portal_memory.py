"""The portal's memory store beside LangGraph's PostgresStore on the same PostgreSQL, and on
SQLite, measured in one run: put, get and search through our HTTP API (a real `webagents
portal serve`) and through the store layer (the service functions the API calls, one
transaction per call as a request has), at each size; the local model's embedding
throughput; a first sync of 10k notes into a fresh machine (`memory: {portal: true}`).

    .venv/bin/pip install langgraph-checkpoint-postgres   # the peer (not a project dependency)
    .venv/bin/python bench/portal_memory.py [--sizes 10000 100000] [--repeat 100]

The same entries go into every store: N notes over 100 callers' namespaces, the owner's and
shared. Our search is hybrid (full-text and the local model's vectors, fused); the query is
embedded by the local model inside each timed search. The bulk's vectors are random unit
vectors stored through the embedding queue's own `store` (the time of a search does not
depend on their values, and embedding 100k notes would take the run's whole budget); the
embedding throughput is measured on its own. PostgreSQL here has no pgvector, so
LangGraph's PostgresStore has no vector index: its `search(query=...)` ignores the query and
lists the namespace, newest first; that is what it offers here, reported as such.

The PostgreSQL cluster is a throwaway one (initdb, unix socket, fsync off) shared by both
stores, so the comparison is like for like, not a production tuning.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import random
import re
import subprocess
import sys
import tempfile
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

from sqlalchemy import Engine  # noqa: E402
from tests.portal.databases import PostgresServer, _Cluster  # noqa: E402

from webagents.portal import admin  # noqa: E402
from webagents.portal.accounts.auth import agent_key_scope  # noqa: E402
from webagents.portal.agents import service as agents  # noqa: E402
from webagents.portal.agents.schemas import AgentIn  # noqa: E402
from webagents.portal.db.engine import make_engine  # noqa: E402
from webagents.portal.db.migrate import upgrade  # noqa: E402
from webagents.portal.embeddings import Embedder, make_embedder  # noqa: E402
from webagents.portal.memory import embedding_queue, service  # noqa: E402
from webagents.portal.memory import search as searching  # noqa: E402
from webagents.portal.memory.repository import MemoryStore  # noqa: E402
from webagents.portal.settings import PortalSettings  # noqa: E402

CALLERS = 100
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
        words = rng.choices(_WORDS, k=rng.randint(20, 40))
        made.append(Note(namespace, f"note-{n}", " ".join(words[:5]), " ".join(words)))
    return made


def queries(count: int) -> list[str]:
    rng = random.Random(99)
    return [" ".join(rng.choices(_WORDS, k=3)) for _ in range(count)]


# --- our store -------------------------------------------------------------------------


def make_agent(engine: Engine) -> str:
    """A user and a published agent; the agent's key."""
    scope = admin.add_user(engine, f"bench{uuid.uuid4().hex[:6]}", "bench-password-1234")
    with admin.transaction(engine) as db:
        made = agents.create_agent(db, scope, AgentIn(name=f"bench-{uuid.uuid4().hex[:8]}"))
    return made.rawApiKey


@contextlib.contextmanager
def store_of(engine: Engine, key: str) -> Iterator[MemoryStore]:
    with admin.transaction(engine) as db:
        yield MemoryStore.for_agent(db, agent_key_scope(db, f"Bearer {key}"))


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
                )
    took = time.perf_counter() - began
    rng = np.random.default_rng(1)
    while True:
        with admin.transaction(engine) as db:
            due = embedding_queue.due(db, model, 2000)
            if not due:
                break
            vectors = rng.standard_normal((len(due), dimensions)).astype(np.float32)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            embedding_queue.store(db, model, list(zip(due, vectors.tolist(), strict=True)))
    return took


def layer_timings(
    engine: Engine, key: str, embedder: Embedder | None, asked: list[str], repeat: int
) -> dict[str, float]:
    fresh = iter(range(10**9))
    said = iter(asked * (repeat // len(asked) + 2))

    def put() -> None:
        with store_of(engine, key) as store:
            service.put(
                store,
                namespace="caller:user7",
                key=f"new-{next(fresh)}",
                content=next(said),
                by=service.BY_AGENT,
            )

    def get() -> None:
        with store_of(engine, key) as store:
            service.get(store, "caller:user7", "note-7")

    def search(namespaces: list[str] | None) -> Callable[[], None]:
        def run() -> None:
            with store_of(engine, key) as store:
                searching.search(store, next(said), namespaces, limit=10, embedder=embedder)

        return run

    times = {"put": median_ms(put, repeat), "get": median_ms(get, repeat)}
    search(["caller:user7", "shared"])()  # the vectors loaded once, as a running portal has
    times["search caller"] = median_ms(search(["caller:user7", "shared"]), repeat)
    search(None)()
    times["search all"] = median_ms(search(None), repeat)
    return times


@contextlib.contextmanager
def portal_process(url: str, home: Path, embeddings: str) -> Iterator[str]:
    env = {**os.environ, "HOME": str(home), "PYTHONPATH": str(ROOT / "src")}
    command = [str(Path(sys.executable).parent / "webagents"), "portal", "serve"]
    child = subprocess.Popen(
        [*command, "--port", "0", "--database", url, "--embeddings", embeddings],
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
        yield found.group(1)
    finally:
        child.terminate()
        child.wait(30)


def http_timings(base: str, key: str, asked: list[str], repeat: int) -> dict[str, float]:
    fresh = iter(range(10**9))
    said = iter(asked * (repeat // len(asked) + 2))
    path = "/api/storage/memory-scoped"
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}) as http:

        def call(method: str, **kwargs: Any) -> Callable[[], None]:
            def run() -> None:
                params = kwargs.get("params")
                if callable(params):
                    params = params()
                body = kwargs.get("json")
                if callable(body):
                    body = body()
                answer = http.request(method, path, params=params, json=body)
                answer.raise_for_status()

            return run

        put = call(
            "PUT",
            json=lambda: {
                "namespace": "caller:user8",
                "key": f"http-{next(fresh)}",
                "content": next(said),
                "description": "",
                "source": "bench",
                "at": None,
            },
        )
        get = call("GET", params={"action": "get", "namespace": "caller:user8", "key": "note-8"})

        def search(namespaces: list[str]) -> Callable[[], None]:
            return call(
                "GET",
                params=lambda: (
                    [("action", "search"), ("q", next(said)), ("limit", "10")]
                    + [("namespace", n) for n in namespaces]
                ),
            )

        times = {"put": median_ms(put, repeat), "get": median_ms(get, repeat)}
        search(["caller:user8", "shared"])()
        times["search caller"] = median_ms(search(["caller:user8", "shared"]), repeat)
        search([])()
        times["search all"] = median_ms(search([]), repeat)
        return times


# --- the peer: LangGraph's PostgresStore -------------------------------------------------


def langgraph_timings(
    url: str, batch: list[Note], asked: list[str], repeat: int
) -> dict[str, float]:
    from langgraph.store.base import PutOp
    from langgraph.store.postgres import PostgresStore

    libpq = url.replace("postgresql+psycopg://", "postgresql://")
    with PostgresStore.from_conn_string(libpq) as store:
        store.setup()
        began = time.perf_counter()
        for start in range(0, len(batch), 1000):
            store.batch(
                [
                    PutOp(
                        ("memories", n.namespace),
                        n.key,
                        {"description": n.description, "content": n.content},
                        index=False,
                    )
                    for n in batch[start : start + 1000]
                ]
            )
        loaded = time.perf_counter() - began
        fresh = iter(range(10**9))
        said = iter(asked * (repeat // len(asked) + 2))
        times = {
            "load s": loaded,
            "put": median_ms(
                lambda: store.put(
                    ("memories", "caller:user7"),
                    f"new-{next(fresh)}",
                    {"description": "", "content": next(said)},
                    index=False,
                ),
                repeat,
            ),
            "get": median_ms(lambda: store.get(("memories", "caller:user7"), "note-7"), repeat),
            "search caller": median_ms(
                lambda: store.search(("memories", "caller:user7"), query=next(said), limit=10),
                repeat,
            ),
            "search all": median_ms(
                lambda: store.search(("memories",), query=next(said), limit=10), repeat
            ),
        }
        return times


# --- the run ------------------------------------------------------------------------------


def embedding_throughput(embedder: Embedder, count: int = 512) -> float:
    texts = [n.content for n in notes(count)]
    embedder.embed(texts[:32])  # the model loaded
    began = time.perf_counter()
    for start in range(0, count, 32):
        embedder.embed(texts[start : start + 32])
    return count / (time.perf_counter() - began)


def first_sync(base: str, key: str, count: int, work: Path) -> float:
    """Seconds for a fresh machine's first pull of `count` notes into an agent folder."""
    from webagents.skills.memory.sync import bench_first_pull  # see memory/sync.py

    return bench_first_pull(base, key, work / "fresh-agent", expected=count)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--repeat", type=int, default=100)
    parser.add_argument("--sync", type=int, default=10_000, help="notes in the first sync")
    args = parser.parse_args()

    print(f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    embedder = make_embedder("local")
    assert embedder is not None
    print(f"embedding ({embedder.name}, batch 32): {embedding_throughput(embedder):.0f} texts/s")
    asked = queries(50)
    cluster = _Cluster()
    server = PostgresServer(cluster.start())
    work = Path(tempfile.mkdtemp(prefix="wa-bench-"))
    rows: list[tuple[str, int, str, dict[str, float]]] = []
    try:
        for size in args.sizes:
            batch = notes(size)
            for kind in ("sqlite", "postgresql"):
                url = (
                    f"sqlite:///{work / f'{kind}-{size}.db'}"
                    if kind == "sqlite"
                    else server.new_database()
                )
                engine = make_engine(PortalSettings(database_url=url))
                upgrade(engine)
                admin.open_database(PortalSettings(database_url=url)).dispose()  # signing key
                key = make_agent(engine)
                loaded = load(engine, key, batch, embedder.dimensions, embedder.name)
                layer = layer_timings(engine, key, embedder, asked, args.repeat)
                rows.append((kind, size, "ours, store layer", {"load s": loaded, **layer}))
                engine.dispose()
                with portal_process(url, work, "local") as base:
                    rows.append(
                        (kind, size, "ours, HTTP", http_timings(base, key, asked, args.repeat))
                    )
                    if size == args.sizes[0] and kind == "postgresql" and args.sync:
                        sync_key = key
                        sync_url = url
                print(f"{kind} {size}: done", flush=True)
            rows.append(
                (
                    "postgresql",
                    size,
                    "LangGraph PostgresStore",
                    langgraph_timings(server.new_database(), batch, asked, args.repeat),
                )
            )
        if args.sync:
            with portal_process(sync_url, work, "local") as base:
                seconds = first_sync(base, sync_key, args.sizes[0], work)
            print(f"first sync of {args.sizes[0]} notes into a fresh machine: {seconds:.2f} s")
    finally:
        server.drop_all()
        cluster.stop()
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    print()
    print("| database | entries | store | load s | put | get | search caller | search all |")
    print("|---|---:|---|---:|---:|---:|---:|---:|")
    for kind, size, what, t in rows:
        load_s = f"{t['load s']:.1f}" if "load s" in t else ""
        print(
            f"| {kind} | {size} | {what} | {load_s} | {t['put']:.2f} | {t['get']:.2f} | "
            f"{t['search caller']:.2f} | {t['search all']:.2f} |"
        )


if __name__ == "__main__":
    main()
