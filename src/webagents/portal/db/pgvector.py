"""PostgreSQL's `vector` extension (pgvector), where the server has it: the column and indexes
that let search rank the memory store's vectors in the database (memory/vector_index.py).

memory_vectors keeps its float32 bytes (`vector`: what search reads without pgvector, so the
extension can go and come back) and gains `embedding`, an untyped `vector`, when the
extension is available: `enable`, run by migration 0014 and again at each start (for an
extension installed after the migrations ran). Untyped, because each embedding model has its
own dimensions: a partial HNSW index per model (`WHERE model = '...'`, on
`embedding::vector(N)`, cosine; HNSW_M and HNSW_EF_CONSTRUCTION) is made when the first
vector of that model is stored, and one built with other parameters is rebuilt at a start. A
column per dimension would need a migration for each new model's size; an index per model
also keeps one model's search out of another's graph. Neither the column nor the indexes are
in the models (tables.py): the migrations' comparison leaves them out (migrate.include_name).
"""

from __future__ import annotations

import hashlib
import logging
import threading
import uuid
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Engine, Result, text
from sqlalchemy.dialects import postgresql
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session
from sqlalchemy.types import UserDefinedType

from . import dialect

if TYPE_CHECKING:  # numpy is imported where vectors are read (a command that reads none: no numpy)
    import numpy as np
    import numpy.typing as npt

log = logging.getLogger("webagents.portal")

COLUMN = "embedding"
INDEX_PREFIX = "memory_vectors_hnsw_"
BACKFILL_BATCH = 2000
MIN_VERSION = (0, 8)  # hnsw.iterative_scan (vector_index.py)
# The HNSW graph's links per node and candidates kept while it is built. pgvector's defaults
# (16, 64) found 0.83 of the true ten at most (ef_search 1000) on the local model's vectors
# of 100,000 notes; m 32 with ef_construction 200 found 0.925-0.985 (builds differ), with
# 400 0.966, the question's own note among the ten for 0.70 of them against exact's 0.74
# (0.65 at 200), at the same search time, its build 1.8 times as long (bench/README.md,
# bench/pgvector_recall.py, 2026-12-07; m 64 found 0.979 at 1.5 times the search time).
# Part of the index's name: an index built otherwise is replaced at the next start
# (`enable`).
HNSW_M, HNSW_EF_CONSTRUCTION = 32, 400
BUILD_AT_START_UP_TO = 20_000
"""A model's index over more vectors than this is left to the operator (the log says how)."""


class VectorType(UserDefinedType[object]):
    """pgvector's type, named so that reflecting memory_vectors (the migrations' comparison
    with the models) knows the column instead of warning about it."""

    cache_ok = True

    def get_col_spec(self, **_: Any) -> str:
        return "vector"


postgresql.base.ischema_names.setdefault("vector", VectorType)

_in_use: weakref.WeakKeyDictionary[Engine, bool] = weakref.WeakKeyDictionary()
_indexed: set[tuple[str, str, int]] = set()  # (database, model, dimensions) known indexed
_lock = threading.Lock()


def literal(vector: Sequence[float] | npt.NDArray[np.float32]) -> str:
    """pgvector's text form of a vector: '[x,y,...]'."""
    return "[" + ",".join(repr(float(x)) for x in vector) + "]"


def quoted(model: str) -> str:
    """A model's name as an SQL literal. Inlined, not bound: the planner uses a partial
    index only where it sees the predicate's value, which a prepared statement's generic
    plan does not show it."""
    return "'" + model.replace("'", "''") + "'"


def _engine(bind: Session | Connection) -> Engine:
    found = bind.get_bind() if isinstance(bind, Session) else bind
    return found if isinstance(found, Engine) else found.engine


def _execute(
    bind: Session | Connection,
    sql: str,
    params: dict[str, Any] | list[dict[str, Any]] | None = None,
) -> Result[*tuple[Any, ...]]:
    return bind.execute(text(sql), params or {})


def in_use(bind: Session | Connection) -> bool:
    """Whether this database ranks vectors: memory_vectors has the `embedding` column
    (looked up once per engine)."""
    if not dialect.is_postgresql(bind):
        return False
    engine = _engine(bind)
    with _lock:
        known = _in_use.get(engine)
    if known is None:
        known = bool(
            _execute(
                bind,
                "SELECT count(*) FROM information_schema.columns WHERE table_schema = "
                "current_schema() AND table_name = 'memory_vectors' AND column_name = :column",
                {"column": COLUMN},
            ).scalar()
        )
        with _lock:
            _in_use[engine] = known
    return known


def enable(connection: Connection) -> bool:
    """On PostgreSQL with pgvector available: the extension, the column, the vectors stored
    before it (from their bytes) and each model's index. Idempotent; False (nothing done) on
    SQLite or without the extension."""
    if not dialect.is_postgresql(connection):
        return False
    version = _execute(
        connection,
        "SELECT coalesce(installed_version, default_version) FROM pg_available_extensions "
        "WHERE name = 'vector'",
    ).scalar()
    if version is None:
        return False
    if _older(str(version), MIN_VERSION):
        log.warning(
            "pgvector %s is older than %s (iterative index scans): search ranks vectors in "
            "the portal process; update the extension (ALTER EXTENSION vector UPDATE) and "
            "restart the portal",
            version,
            ".".join(map(str, MIN_VERSION)),
        )
        return False
    try:
        with connection.begin_nested():
            _execute(connection, "CREATE EXTENSION IF NOT EXISTS vector")
    except DBAPIError as exc:  # available, but this role may not create it
        log.warning(
            "pgvector is available but could not be enabled (%s): search ranks vectors in "
            "the portal process; as a superuser, run CREATE EXTENSION vector in this "
            "database, then restart the portal",
            str(exc.orig).strip(),
        )
        return False
    if not in_use(connection):  # ALTER TABLE locks the table even when there is nothing to do
        _execute(connection, f"ALTER TABLE memory_vectors ADD COLUMN IF NOT EXISTS {COLUMN} vector")
    while True:
        rows = _execute(
            connection,
            f"SELECT entry_id, vector FROM memory_vectors WHERE {COLUMN} IS NULL LIMIT :batch",
            {"batch": BACKFILL_BATCH},
        ).all()
        if not rows:
            break
        _store(connection, _from_bytes(rows))
    models = _execute(
        connection,
        f"SELECT model, vector_dims({COLUMN}), count(*) FROM memory_vectors GROUP BY 1, 2",
    ).all()
    listed = _execute(
        connection,
        "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema() "
        "AND tablename = 'memory_vectors' AND indexname LIKE :prefix",
        {"prefix": INDEX_PREFIX + "%"},
    ).scalars()
    present = set(listed)
    for model, dimensions, count in models:
        base, name = _base_name(model, dimensions), index_name(model, dimensions)
        # The model's index built with other parameters: replaced once the new one is built.
        older = {n for n in present if n != name and (n == base or n.startswith(base + "_m"))}
        if name not in present and count > BUILD_AT_START_UP_TO:
            _leave_to_the_operator(connection, model, dimensions, count, older)
            continue
        ensure_index(connection, model, dimensions)
        for stale in older:
            _execute(connection, f'DROP INDEX IF EXISTS "{stale}"')
    with _lock:
        _in_use[connection.engine] = True
    return True


def _from_bytes(
    rows: Sequence[Any],
) -> list[tuple[uuid.UUID, npt.NDArray[np.float32]]]:
    """(entry id, vector) of memory_vectors' rows of (entry_id, vector bytes)."""
    from .vector_bytes import decode  # numpy: only where vectors are read

    return [(row[0], decode(row[1])) for row in rows]


def _older(version: str, least: tuple[int, ...]) -> bool:
    parts = tuple(int(p) for p in version.split(".")[: len(least)] if p.isdigit())
    return parts < least


def _base_name(model: str, dimensions: int) -> str:
    digest = hashlib.sha256(model.encode()).hexdigest()[:16]
    return f"{INDEX_PREFIX}{digest}_{dimensions}"


def index_name(model: str, dimensions: int) -> str:
    """The model's index's name, with the parameters it is built with."""
    return f"{_base_name(model, dimensions)}_m{HNSW_M}e{HNSW_EF_CONSTRUCTION}"


def _create_index(model: str, dimensions: int, *, concurrently: bool = False) -> str:
    return (
        f"CREATE INDEX {'CONCURRENTLY ' if concurrently else ''}IF NOT EXISTS "
        f"{index_name(model, dimensions)} ON memory_vectors "
        f"USING hnsw (({COLUMN}::vector({dimensions})) vector_cosine_ops) "
        f"WITH (m = {HNSW_M}, ef_construction = {HNSW_EF_CONSTRUCTION}) "
        f"WHERE model = {quoted(model)}"
    )


def ensure_index(bind: Session | Connection, model: str, dimensions: int) -> None:
    """The model's HNSW index, made once; a no-op once this process saw it made (or left
    it to the operator at start)."""
    key = (str(_engine(bind).url), model, dimensions)
    with _lock:
        if key in _indexed:
            return
    _execute(bind, _create_index(model, dimensions))
    with _lock:
        _indexed.add(key)


def _leave_to_the_operator(
    connection: Connection, model: str, dimensions: int, count: int, older: set[str]
) -> None:
    """A large index is not built at start (minutes, with the table's writes waiting, and
    more memory than PostgreSQL's default maintenance_work_mem gives): searches rank exactly
    (or by the older index) until the operator builds it beside the running portal."""
    drops = "".join(f'; DROP INDEX CONCURRENTLY "{n}"' for n in sorted(older))
    log.warning(
        "pgvector: the HNSW index of %s's %d vectors is not built at start (too large to build "
        "while the portal starts); build it beside the running portal, in psql: SET "
        "maintenance_work_mem = '1GB'; %s%s",
        model,
        count,
        _create_index(model, dimensions, concurrently=True),
        drops,
    )
    with _lock:  # nor by the embedding worker's first batch
        _indexed.add((str(_engine(connection).url), model, dimensions))


def keep(session: Session, model: str, stored: Sequence[tuple[uuid.UUID, Sequence[float]]]) -> None:
    """The vectors just stored as bytes, in the `embedding` column too (where in use)."""
    if not stored or not in_use(session):
        return
    ensure_index(session, model, len(stored[0][1]))
    _store(session, stored)


def _store(
    bind: Session | Connection,
    stored: Sequence[tuple[uuid.UUID, Sequence[float] | npt.NDArray[np.float32]]],
) -> None:
    _execute(
        bind,
        f"UPDATE memory_vectors SET {COLUMN} = CAST(:v AS vector) WHERE entry_id = :id",
        [{"id": ident, "v": literal(vector)} for ident, vector in stored],
    )


def disable(connection: Connection) -> None:
    """The column and its indexes gone (the extension stays: other schemas may use it)."""
    if dialect.is_postgresql(connection):
        _execute(connection, f"ALTER TABLE memory_vectors DROP COLUMN IF EXISTS {COLUMN}")
        with _lock:
            _in_use.pop(connection.engine, None)
            _indexed.clear()
