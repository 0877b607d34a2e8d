"""Search's stored vectors ranked inside PostgreSQL, where it has the `vector` extension
(pgvector; db/pgvector.py makes its column and indexes): no vectors are held in the portal
process, however many agents are searched (vector_cache.py is the path without it).

The filter is the agent, the model and the namespaces, and it must not cost recall: an HNSW
scan filtered afterwards by agent and namespaces returns fewer results than asked, the rarer
the filter's rows are in the index (LangGraph's PostgresStore returns 0.37-0.41 of the 10
asked for one namespace of 100k). So:

- exact inside the filter (the (agent_id, namespace, key) index narrows, then each of those
  rows' distance, sorted) when namespaces are asked, or when the agent has at most
  EXACT_UP_TO live entries: every result is the true nearest;
- an agent's search of all its namespaces past that: the model's HNSW index with pgvector
  0.8's iterative scan (`hnsw.iterative_scan`), which goes on reading the graph until
  `limit` rows pass the agent's filter, ef_search raised for recall, re-sorted exactly
  here. If it returns fewer than asked (the agent's rows too rare in the graph for
  `hnsw.max_scan_tuples`), the exact search answers instead.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
from sqlalchemy import TextClause, Uuid, bindparam, text

from ..db.pgvector import COLUMN, literal, quoted
from .repository import MemoryStore

# Up to this many live entries an agent's search of all its namespaces is exact; past it,
# the model's HNSW index (db/pgvector.py: m 32, ef_construction 400) with EF_SEARCH. Measured
# on the local model's vectors of 100,000 English notes (bench/README.md,
# bench/pgvector_recall.py; a 2-core machine at load 14-16): the index found 0.985 of the
# true ten at ef_search 1000 (0.92 at 400; pgvector's default index 0.83 at most; the graph's
# own recall, build by build: db/pgvector.py) in 61-95 ms at the median, where the exact
# search took 780-790 ms (20-24 against 355-394 ms on a quiet machine, 2026-12-07); at
# 10,000 the exact search took 160-190 ms, at 5,000 (load 3) 27 ms against the index's 3-7.
# (On random vectors, HNSW's worst case, the default index found 0.23 at 100,000: the exact
# search answers below this size, and wherever the index gives fewer than asked.)
EXACT_UP_TO = 20_000
EF_SEARCH = 1000  # candidates the HNSW scan keeps: pgvector's most (its default 40 lost half)
ITERATIVE = "relaxed_order"  # or strict_order: pgvector's hnsw.iterative_scan

Vector = npt.NDArray[np.float32]


def best(
    store: MemoryStore,
    model: str,
    dimensions: int,
    namespaces: Sequence[str] | None,
    query: Vector,
    limit: int,
) -> list[tuple[float, uuid.UUID]]:
    """The `limit` entries whose current vectors of `model` are nearest `query` (unit
    length: cosine), best first, in `namespaces` (None: all of the agent's)."""
    if namespaces is not None and not namespaces:
        return []
    if namespaces is None:
        live = store.usage().entries
        if live > EXACT_UP_TO:
            found = by_index(store, model, dimensions, query, limit)
            if len(found) >= min(limit, live):
                return found
    return _ranked(store, model, dimensions, namespaces, query, limit, indexed=False)


def by_index(
    store: MemoryStore, model: str, dimensions: int, query: Vector, limit: int
) -> list[tuple[float, uuid.UUID]]:
    """The HNSW index's answer for all of the agent's namespaces (EF_SEARCH and ITERATIVE's
    settings), best first: up to `limit` entries, fewer where the scan gave up."""
    return _ranked(store, model, dimensions, None, query, limit, indexed=True)


def _ranked(
    store: MemoryStore,
    model: str,
    dimensions: int,
    namespaces: Sequence[str] | None,
    query: Vector,
    limit: int,
    *,
    indexed: bool,
) -> list[tuple[float, uuid.UUID]]:
    statement, params = _statement(model, dimensions, namespaces, query, limit, indexed)
    try:
        if indexed:
            _iterative(store, limit)
        rows = [row._mapping for row in store.run(statement, params)]
    finally:
        if indexed:
            _iterative(store, None)
    found = [(float(row["score"]), _uuid(row["entry_id"])) for row in rows]
    found.sort(key=lambda hit: -hit[0])  # relaxed order: nearly sorted, sorted here
    return found


def plan(
    store: MemoryStore,
    model: str,
    dimensions: int,
    namespaces: Sequence[str] | None,
    query: Vector,
    limit: int,
    *,
    indexed: bool,
) -> str:
    """PostgreSQL's plan of one ranking (EXPLAIN), for the tests and the benchmark: whether
    the index or the exact search answers."""
    statement, params = _statement(model, dimensions, namespaces, query, limit, indexed, True)
    try:
        if indexed:
            _iterative(store, limit)
        return "\n".join(str(row[0]) for row in store.run(statement, params))
    finally:
        if indexed:
            _iterative(store, None)


def _iterative(store: MemoryStore, limit: int | None) -> None:
    """The HNSW scan's settings for one statement (`limit` None: back to the defaults after
    it, in a `finally`). The connection's own settings (SET), not the transaction's (SET
    LOCAL): a session that only reads has no transaction on PostgreSQL (db/dialect.py's
    `reading`); undone at once, so the request's next statements (full-text's sort) plan as
    usual, and a pooled connection is never given back with them. The iterative scan
    reads on through the graph until `limit` rows pass the filter; ef_search is how many
    candidates it keeps; with sorting off the planner takes the index, which the caller
    chose (it could otherwise sort the agent's rows, exact but slow past EXACT_UP_TO)."""
    if limit is None:
        settings = {"hnsw.iterative_scan": "DEFAULT", "hnsw.ef_search": "DEFAULT"}
        settings["enable_sort"] = "DEFAULT"
    else:
        settings = {
            "hnsw.iterative_scan": ITERATIVE,
            "hnsw.ef_search": str(max(EF_SEARCH, limit)),
            "enable_sort": "off",
        }
    for name, value in settings.items():
        store.run(text(f"SET {name} = {value}"), {})


def _statement(
    model: str,
    dimensions: int,
    namespaces: Sequence[str] | None,
    query: Vector,
    limit: int,
    indexed: bool,
    explain: bool = False,
) -> tuple[TextClause, dict[str, object]]:
    distance = f"v.{COLUMN}::vector({dimensions}) <=> CAST(:q AS vector({dimensions}))"
    # The index orders by the distance operator alone; ordering by the score (1 - distance)
    # is the exact search, which no index answers.
    order = distance if indexed else "score DESC"
    sql = (
        f"SELECT v.entry_id, 1 - ({distance}) AS score "
        "FROM memory_vectors AS v JOIN memory_entries AS e ON e.id = v.entry_id "
        f"WHERE v.agent_id = :agent AND v.model = {quoted(model)} AND e.agent_id = :agent "
        "AND e.deleted_at IS NULL AND v.entry_cursor = e.cursor"
    )
    if namespaces is not None:
        sql += " AND e.namespace IN :namespaces"
    statement = text(
        f"{'EXPLAIN ' if explain else ''}{sql} ORDER BY {order} LIMIT :limit"
    ).bindparams(bindparam("agent", type_=Uuid()))
    params: dict[str, object] = {"q": literal(query), "limit": limit}
    if namespaces is not None:
        statement = statement.bindparams(bindparam("namespaces", expanding=True))
        params["namespaces"] = list(namespaces)
    return statement, params


def _uuid(value: object) -> uuid.UUID:
    return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))
