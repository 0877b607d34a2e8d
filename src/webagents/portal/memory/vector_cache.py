"""Search's stored vectors, kept in this process: per agent and model, a matrix per namespace.
(On PostgreSQL with pgvector the database ranks them instead: vector_index.py.)

Loaded from the database on a namespace's first search, then kept up to date by what changed:
each agent's feed says (last cursor, vectors version); when either moved, only the entries
changed after the cursor the matrices were read at (the (agent_id, cursor) index), and the
entries known to lack a vector then, are read again, their rows replaced, added or dropped.
So a batch of embeddings costs the next search a few rows, not a reload of the agent.

A namespace's matrix serves every search that asks it: a caller's search ranks its own and
`shared`, the owner's all of them, with no row kept twice. The cache is bounded by bytes
(`WEBAGENTS_PORTAL_VECTOR_CACHE_MB`, 512 by default): the agents searched longest ago are
dropped first, and an agent whose vectors alone pass the bound is read for each search.
"""

from __future__ import annotations

import logging
import os
import threading
import uuid
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from sqlalchemy import Uuid, bindparam, text

from ..db import vector_bytes
from . import vector_index
from .repository import MemoryStore

log = logging.getLogger("webagents.portal.memory")

LIMIT_ENV = "WEBAGENTS_PORTAL_VECTOR_CACHE_MB"
DEFAULT_LIMIT_MB = 512.0
ROW_OVERHEAD = 160  # bytes a row costs beside its vector: its id, in a list and a dict
MAX_PENDING = 1000  # entries without a vector looked up by id at each refresh; past it, reload

Vector = npt.NDArray[np.float32]


def limit_bytes() -> int:
    given = os.environ.get(LIMIT_ENV, "")
    try:
        megabytes = float(given) if given else DEFAULT_LIMIT_MB
    except ValueError:
        log.warning("%s=%r is not a number of MB: using %s", LIMIT_ENV, given, DEFAULT_LIMIT_MB)
        megabytes = DEFAULT_LIMIT_MB
    return int(max(megabytes, 0.0) * 1024 * 1024)


class _Rows:
    """One namespace's vectors: a matrix with room to grow, a row per entry id. A dropped
    row is zeroed and its id cleared (compacted once a quarter of the rows are dropped)."""

    def __init__(self, dimensions: int, ids: list[uuid.UUID], matrix: Vector) -> None:
        self.dimensions = dimensions
        self.ids: list[uuid.UUID | None] = list(ids)
        self.row = {ident: n for n, ident in enumerate(ids)}
        self.matrix = matrix
        self.used = len(ids)
        self.dropped = 0

    @property
    def nbytes(self) -> int:
        return int(self.matrix.nbytes) + ROW_OVERHEAD * self.used

    def put(self, ident: uuid.UUID, vector: Vector) -> None:
        at = self.row.get(ident)
        if at is None:
            if self.used == len(self.matrix):
                grown = np.zeros((max(16, self.used * 5 // 4 + 16), self.dimensions), np.float32)
                grown[: self.used] = self.matrix[: self.used]
                self.matrix = grown
            at = self.used
            self.used += 1
            self.ids.append(ident)
            self.row[ident] = at
        self.matrix[at] = vector

    def drop(self, ident: uuid.UUID) -> None:
        at = self.row.pop(ident, None)
        if at is None:
            return
        self.ids[at] = None
        self.matrix[at] = 0.0
        self.dropped += 1
        if self.dropped * 4 > self.used:
            keep = [n for n, i in enumerate(self.ids) if i is not None]
            self.matrix = np.ascontiguousarray(self.matrix[keep])
            self.ids = [self.ids[n] for n in keep]
            self.row = {i: n for n, i in enumerate(self.ids) if i is not None}
            self.used, self.dropped = len(self.ids), 0

    def best(self, query: Vector, limit: int) -> list[tuple[float, uuid.UUID]]:
        if self.used == 0:
            return []
        scores = self.matrix[: self.used] @ query
        top = min(limit, self.used)
        chosen = np.argpartition(-scores, top - 1)[:top]
        found = []
        for n in chosen:
            ident = self.ids[int(n)]
            if ident is not None:
                found.append((float(scores[int(n)]), ident))
        return found


@dataclass
class _Agent:
    """One agent's vectors of one model, as of (cursor, version) of its feed."""

    model: str
    dimensions: int
    cursor: int = 0
    version: int = -1
    complete: bool = False  # every namespace is loaded (the owner searched them all)

    def __post_init__(self) -> None:
        self.lock = threading.Lock()
        self.namespaces: dict[str, _Rows] = {}
        self.pending: set[uuid.UUID] = set()  # live entries without a current vector

    @property
    def nbytes(self) -> int:
        return sum(rows.nbytes for rows in self.namespaces.values())


@dataclass
class Counts:
    """What the cache did (for tests and the benchmark): full reads and refreshes by change."""

    loads: int = 0
    refreshes: int = 0


counts = Counts()
_agents: OrderedDict[tuple[uuid.UUID, str], _Agent] = OrderedDict()
_lock = threading.Lock()


def cached() -> dict[tuple[uuid.UUID, str], int]:
    """(agent, model): bytes kept, least recently searched first."""
    with _lock:
        return {key: agent.nbytes for key, agent in _agents.items()}


def clear() -> None:
    with _lock:
        _agents.clear()


def best(
    store: MemoryStore,
    model: str,
    dimensions: int,
    namespaces: Sequence[str] | None,
    query: Vector,
    limit: int,
) -> list[tuple[float, uuid.UUID]]:
    """The `limit` entries whose vectors are nearest `query` (unit length: cosine), best first,
    in `namespaces` (None: all of the agent's). Ranked by the database where it can (PostgreSQL
    with pgvector): then nothing is kept here."""
    if store.ranks_vectors:
        return vector_index.best(store, model, dimensions, namespaces, query, limit)
    key = (store.agent_id, model)
    with _lock:
        agent = _agents.get(key)
        if agent is None or agent.dimensions != dimensions:
            agent = _agents[key] = _Agent(model, dimensions)
        _agents.move_to_end(key)
    cursor, version = store.feed_state()
    with agent.lock:
        if (cursor, version) != (agent.cursor, agent.version):
            _refresh(store, agent, cursor, version)
        wanted = list(namespaces) if namespaces is not None else None
        if wanted is None and not agent.complete:
            _load(store, agent, None)
        elif wanted is not None:
            missing = [n for n in wanted if n not in agent.namespaces]
            if missing:
                _load(store, agent, missing)
        chosen = wanted if wanted is not None else list(agent.namespaces)
        found = [
            hit
            for n in chosen
            if n in agent.namespaces
            for hit in agent.namespaces[n].best(query, limit)
        ]
    _bound(key)
    found.sort(key=lambda hit: -hit[0])
    return found[:limit]


def _bound(using: tuple[uuid.UUID, str]) -> None:
    with _lock:
        limit = limit_bytes()
        alone = _agents[using].nbytes if using in _agents else 0
        if alone > limit:
            log.warning(
                "one agent's vectors (%.1f MB) pass %s=%.1f: they are read for each search, "
                "raise it",
                alone / 2**20,
                LIMIT_ENV,
                limit / 2**20,
            )
            del _agents[using]
        total = sum(agent.nbytes for agent in _agents.values())
        for key in list(_agents):
            if total <= limit:
                break
            if key != using:
                total -= _agents.pop(key).nbytes


# The reads. Each row: id, namespace, cursor, live, and the vector if it is of this model.

_SELECT = (
    "SELECT e.id, e.namespace, e.cursor, e.deleted_at IS NULL, v.entry_cursor, v.vector "
    "FROM memory_entries AS e LEFT JOIN memory_vectors AS v "
    "ON v.entry_id = e.id AND v.model = :model WHERE e.agent_id = :agent"
)


def _rows(store: MemoryStore, agent: _Agent, where: str, **params: object) -> Iterable[tuple]:  # type: ignore[type-arg]
    statement = text(f"{_SELECT} AND {where}").bindparams(bindparam("agent", type_=Uuid()))
    for name, value in params.items():
        if isinstance(value, list):
            kind = Uuid() if name == "ids" else None
            statement = statement.bindparams(bindparam(name, expanding=True, type_=kind))
    return store.run(statement, {**params, "model": agent.model})


def _vector_of(agent: _Agent, row: tuple) -> Vector | None:  # type: ignore[type-arg]
    """The row's vector if it is current: of this model, as of the entry's latest change."""
    _, _, cursor, live, made_at, blob = row
    if not live or blob is None or made_at != cursor or len(blob) != agent.dimensions * 4:
        return None
    return vector_bytes.decode(blob)


def _uuid(value: object) -> uuid.UUID:
    return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))  # SQLite: text


def _load(store: MemoryStore, agent: _Agent, namespaces: list[str] | None) -> None:
    counts.loads += 1
    ids: dict[str, list[uuid.UUID]] = {}
    blobs: dict[str, list[bytes]] = {}
    if namespaces is None:
        rows = _rows(store, agent, "e.deleted_at IS NULL")
    else:
        rows = _rows(
            store,
            agent,
            "e.deleted_at IS NULL AND e.namespace IN :namespaces",
            namespaces=namespaces,
        )
    for row in rows:
        namespace = str(row[1])
        if namespace in agent.namespaces:
            continue  # loaded before, and kept up to date since
        vector = _vector_of(agent, row)
        if vector is None:
            agent.pending.add(_uuid(row[0]))
            continue
        ids.setdefault(namespace, []).append(_uuid(row[0]))
        blobs.setdefault(namespace, []).append(vector.tobytes())
    for namespace in namespaces if namespaces is not None else list(ids):
        if namespace in agent.namespaces:
            continue
        found = ids.get(namespace, [])
        matrix = np.frombuffer(b"".join(blobs.get(namespace, [])), dtype=np.float32)
        agent.namespaces[namespace] = _Rows(
            agent.dimensions, found, matrix.reshape(len(found), agent.dimensions).copy()
        )
    if namespaces is None:
        agent.complete = True


def _refresh(store: MemoryStore, agent: _Agent, cursor: int, version: int) -> None:
    """Up to date with (cursor, version) by the entries changed since, and those pending."""
    if not agent.namespaces or len(agent.pending) > MAX_PENDING:
        agent.namespaces.clear()
        agent.pending.clear()
        agent.complete = False
    else:
        counts.refreshes += 1
        changed = list(_rows(store, agent, "e.cursor > :since", since=agent.cursor))
        pending = sorted(agent.pending)
        if pending:
            changed += _rows(store, agent, "e.id IN :ids", ids=pending)
        for row in changed:
            ident, namespace = _uuid(row[0]), str(row[1])
            rows = agent.namespaces.get(namespace)
            if rows is None and agent.complete:
                rows = agent.namespaces[namespace] = _Rows(
                    agent.dimensions, [], np.zeros((0, agent.dimensions), np.float32)
                )
            vector = _vector_of(agent, row)
            if vector is None:
                if rows is not None:
                    rows.drop(ident)
                if row[3] and rows is not None:
                    agent.pending.add(ident)
                else:
                    agent.pending.discard(ident)
                continue
            agent.pending.discard(ident)
            if rows is not None:
                rows.put(ident, vector)
    agent.cursor, agent.version = cursor, version
