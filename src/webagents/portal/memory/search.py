"""Hybrid search of one agent's notes: full-text and semantic candidates, ordered by
ranking.py (cosine first, a bonus for the full-text place and the rarity of the words
matched). The one place where the two databases differ in queries:

- full-text: SQLite's FTS5 table `memory_fts` (narrowed to the agent inside FTS5, then to the
  namespaces), PostgreSQL's `search_vector` tsvector column (GIN), both made by migration 0006;
  the same index counts how many of the agent's notes hold each query word (up to
  ranking.COMMON_AT: more only says "common"), for its rarity; where meaning answers, the
  full-text half searches for the words that are not common (see `candidates`);
- semantic: the agent's stored vectors of the current model in the asked namespaces, ranked
  exactly by numpy dot products (the vectors are unit length: cosine); vector_cache.py keeps
  them per process, up to date by the rows changed since it read them. On PostgreSQL with
  the `vector` extension the database ranks them instead (vector_index.py).
"""

from __future__ import annotations

import logging
import re
import threading
import unicodedata
import uuid
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
from sqlalchemy import TextClause, Uuid, bindparam, text

from ...portal_wire.memory import SearchHit
from ..db.tables import MemoryEntry
from ..embeddings import Embedder
from ..errors import BadInput
from ..storable import check_storable
from . import ranking, vector_cache
from .repository import MemoryStore
from .schemas import check_namespace
from .service import entry_out

log = logging.getLogger("webagents.portal.memory")

MAX_QUERY_WORDS = 32
MAX_LIMIT = 100
# Below this cosine a note is not counted as found by meaning (unrelated texts score near 0).
MIN_SIMILARITY = 0.1
# Up to this many namespaces narrow SQLite's full-text query inside FTS5 (see _sqlite_text).
FTS_NAMESPACE_PHRASES = 8
_WORD = re.compile(r"\w+")
# English function words: a note that shares only these with a query ("what is the ...") is
# not found by its words. Without this, such matches rank in the full-text list, and with
# its place's bonus push aside what meaning found (a query of nothing else keeps them all).
STOP_WORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before
    being below between both but by can could did do does doing down during each few for from
    further had has have having he her here hers herself him himself his how i if in into is it
    its itself just me more most my myself no nor not of off on once only or other our ours
    ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we were
    what when where which while who whom why will with would you your yours yourself
    yourselves s t d ll m re ve""".split()
)

Semantic = Literal["on", "off", "unavailable"]


@dataclass(frozen=True)
class SearchAnswer:
    entries: list[SearchHit]
    semantic: Semantic  # off: no embedder (--embeddings none); unavailable: it failed now


def search(
    store: MemoryStore,
    query: str,
    namespaces: Sequence[str] | None,
    *,
    limit: int = 10,
    embedder: Embedder | None,
) -> SearchAnswer:
    size = max(1, min(limit, MAX_LIMIT))
    found = candidates(store, query, namespaces, pool=max(size * 3, 30), embedder=embedder)
    # The full-text candidates' text, for the rarity of the words they hold; without meaning
    # the full-text order stands (ranking.rank): nothing is read for it.
    entries = store.live_by_ids(found.by_text) if found.by_meaning else {}
    notes = store.usage().entries if entries else 0
    rare = rarities(found.holding, notes, list(entries.values()))
    ranked = ranking.rank(found.by_text, found.by_meaning, rarities=rare)[:size]
    unread = [i for i in ranked if i not in entries]  # the hits found by meaning alone
    entries.update(store.live_by_ids(unread))
    text_set, meaning_set = set(found.by_text), {ident for _, ident in found.by_meaning}
    hits = [
        SearchHit(
            **entry_out(entries[i]).model_dump(),
            matched=_how(i, text_set, meaning_set),
        )
        for i in ranked
        if i in entries
    ]
    return SearchAnswer(entries=hits, semantic=found.semantic)


@dataclass(frozen=True)
class Candidates:
    """What each half found, best first: full-text ids, and (cosine, id) pairs by meaning."""

    by_text: list[uuid.UUID]
    by_meaning: list[ranking.Scored]
    semantic: Semantic
    # How many of the agent's live notes hold each query word (folded, as `rarities` reads
    # notes), up to ranking.COMMON_AT; empty where meaning found nothing (the full-text order
    # stands).
    holding: dict[str, int]

    def every(self) -> list[uuid.UUID]:
        """Each candidate once."""
        return list(dict.fromkeys([*self.by_text, *(ident for _, ident in self.by_meaning)]))


def candidates(
    store: MemoryStore,
    query: str,
    namespaces: Sequence[str] | None,
    *,
    pool: int,
    embedder: Embedder | None,
) -> Candidates:
    """Up to `pool` notes from each half (bench/search_quality.py ranks them its ways too).
    Where meaning found notes, the full-text half searches only for the query's words that
    are not common (ranking.COMMON_AT): a common word's note earns no bonus, and in a large
    store its matches are thousands, each to be ranked (a search of 100,000 notes spent most
    of its time there). Without meaning's answer (no embedder, the model failing, or no
    vectors yet) every word is searched: the full-text order is the answer."""
    check_storable("q", query)
    words = [w.lower() for w in _WORD.findall(query)][:MAX_QUERY_WORDS]
    if not words:
        raise BadInput("q is empty: send the words to search for", code="empty_query")
    words = [w for w in words if w not in STOP_WORDS] or words
    wanted = sorted({check_namespace(n) for n in namespaces}) if namespaces is not None else None
    semantic: Semantic = "off"
    by_meaning: list[ranking.Scored] = []
    if embedder is not None:
        try:
            by_meaning = _by_meaning(store, embedder, query, wanted, pool)
            semantic = "on"
        except Exception:  # a model endpoint down: full-text still answers
            log.warning("semantic search failed; answering with full-text only", exc_info=True)
            semantic = "unavailable"
    counted = holding(store, words) if by_meaning else {}
    searched = [w for w in words if counted.get(_folded(w), 0) < ranking.COMMON_AT]
    by_text = _full_text(store, searched, wanted, pool) if searched else []
    return Candidates(by_text, by_meaning, semantic, counted)


def _how(
    ident: uuid.UUID, by_text: set[uuid.UUID], by_meaning: set[uuid.UUID]
) -> list[Literal["text", "meaning"]]:
    how: list[Literal["text", "meaning"]] = []
    if ident in by_text:
        how.append("text")
    if ident in by_meaning:
        how.append("meaning")
    return how


def _full_text(
    store: MemoryStore, words: list[str], namespaces: list[str] | None, limit: int
) -> list[uuid.UUID]:
    if store.on_postgresql:
        return _postgres_text(store, words, namespaces, limit)
    return _sqlite_text(store, words, namespaces, limit)


def _sqlite_text(
    store: MemoryStore, words: list[str], namespaces: list[str] | None, limit: int
) -> list[uuid.UUID]:
    # Each word quoted (a \w+ run holds no quote), any of them; bm25 ranks (FTS5's `rank`).
    # The agent and a few namespaces narrow inside FTS5 (a namespace as a phrase of its
    # tokens, a superset), then the namespaces exactly. Many namespaces are not narrowed
    # inside FTS5: each phrase reads the postings of its tokens ("caller" is in every
    # caller's note), so a hundred of them cost more than ranking all of the agent's matches.
    match = _fts_agent(store)
    if namespaces is not None and len(namespaces) <= FTS_NAMESPACE_PHRASES:
        phrases = " OR ".join(f'namespace:"{_quoted(n)}"' for n in namespaces)
        match += f" AND ({phrases})"
    match += " AND {key description content}: (" + " OR ".join(f'"{w}"' for w in words) + ")"
    params: dict[str, object] = {"match": match, "limit": limit}
    query = "SELECT entry_id FROM memory_fts WHERE memory_fts MATCH :match"
    if namespaces is not None:
        query += " AND namespace IN :namespaces"
        params["namespaces"] = namespaces
    statement = text(query + " ORDER BY rank LIMIT :limit")
    if namespaces is not None:
        statement = statement.bindparams(bindparam("namespaces", expanding=True))
    return [uuid.UUID(str(row[0])) for row in store.run(statement, params)]


def _fts_agent(store: MemoryStore) -> str:
    """The FTS5 filter of the store's agent (its id's hex: no quote in it)."""
    return f'agent_id:"{store.agent_id.hex}"'


def _quoted(namespace: str) -> str:
    """A namespace inside an FTS5 string: its double quotes doubled, as FTS5 reads them."""
    return namespace.replace('"', '""')


def _postgres_text(
    store: MemoryStore, words: list[str], namespaces: list[str] | None, limit: int
) -> list[uuid.UUID]:
    query = (
        "SELECT id FROM memory_entries, websearch_to_tsquery('simple', :q) AS q "
        "WHERE agent_id = :agent AND deleted_at IS NULL AND search_vector @@ q"
    )
    params: dict[str, object] = {"q": " or ".join(words)}
    if namespaces is not None:
        query += " AND namespace IN :namespaces"
        params["namespaces"] = namespaces
    statement = _typed(
        text(query + " ORDER BY ts_rank(search_vector, q) DESC, id LIMIT :limit"), namespaces
    )
    params["limit"] = limit
    return [row[0] for row in store.run(statement, params)]


def rarities(
    holding: Mapping[str, int], notes: int, found: Sequence[MemoryEntry]
) -> dict[uuid.UUID, float]:
    """Each full-text candidate's rarity (ranking.rarity among the agent's `notes` live
    notes): that of the rarest of the counted words (`holding`, as `holding()` counts them)
    it holds. A word is held where it is among the note's words as the full-text index takes
    them, near enough: \\w+ runs, lower case, diacritics removed (SQLite's tokenizer removes
    them; PostgreSQL's 'simple' keeps them, so there a note may be found by "café" and counted
    as holding "cafe": the bonus is a little more generous, never wrong about a word it does
    not hold)."""
    asked = set(holding)
    return {
        entry.id: max(
            (
                ranking.rarity(holding[w], notes)
                for w in asked.intersection(_WORD.findall(_folded(_text_of(entry))))
            ),
            default=0.0,
        )
        for entry in found
    }


def _text_of(entry: MemoryEntry) -> str:
    return f"{entry.key} {entry.description} {entry.content}"


def _folded(text: str) -> str:
    return "".join(
        c for c in unicodedata.normalize("NFKD", text.lower()) if not unicodedata.combining(c)
    )


def holding(store: MemoryStore, words: Sequence[str]) -> dict[str, int]:
    """How many of the agent's live notes hold each of `words` (folded), up to
    ranking.COMMON_AT: one statement, a capped index read a word."""
    folded = sorted({_folded(w) for w in words})
    if store.on_postgresql:
        count = (
            "SELECT {n}, count(*) FROM (SELECT 1 FROM memory_entries WHERE agent_id = :agent "
            "AND deleted_at IS NULL AND search_vector @@ plainto_tsquery('simple', :w{n}) "
            "LIMIT :cap) AS holding{n}"
        )
        asked = folded
    else:  # a \w+ run holds no quote
        count = (
            "SELECT {n}, count(*) FROM (SELECT 1 FROM memory_fts WHERE memory_fts MATCH :w{n} "
            "LIMIT :cap)"
        )
        asked = [f'{_fts_agent(store)} AND {{key description content}}: "{w}"' for w in folded]
    statement = text(" UNION ALL ".join(count.format(n=n) for n in range(len(folded))))
    if store.on_postgresql:
        statement = _typed(statement, None)
    params: dict[str, object] = {f"w{n}": a for n, a in enumerate(asked)}
    rows: list[Any] = list(store.run(statement, {**params, "cap": ranking.COMMON_AT}))
    return {folded[int(n)]: int(found) for n, found in rows}


def _typed(statement: TextClause, namespaces: list[str] | None) -> TextClause:
    """The agent's id bound as a UUID (SQLite keeps it as hex text), the namespaces as a list."""
    statement = statement.bindparams(bindparam("agent", type_=Uuid()))
    if namespaces is not None:
        statement = statement.bindparams(bindparam("namespaces", expanding=True))
    return statement


# Semantic: the query's vector (kept for repeated queries) against the agent's stored
# vectors of this model in the asked namespaces (vector_cache keeps them per process).

QUERY_CACHE_SIZE = 256
_queries: OrderedDict[tuple[str, str], npt.NDArray[np.float32]] = OrderedDict()
_queries_lock = threading.Lock()


def query_vector(embedder: Embedder, query: str) -> npt.NDArray[np.float32]:
    """The query's embedding; the last QUERY_CACHE_SIZE are kept (an embedder is
    deterministic for its name), so a search repeated (a page reloaded, the next page, an
    agent asking again) does not run the model again."""
    key = (embedder.name, query)
    with _queries_lock:
        found = _queries.get(key)
        if found is not None:
            _queries.move_to_end(key)
            return found
    made = np.asarray(embedder.embed([query])[0], dtype=np.float32)
    with _queries_lock:
        _queries[key] = made
        while len(_queries) > QUERY_CACHE_SIZE:
            _queries.popitem(last=False)
    return made


def _by_meaning(
    store: MemoryStore,
    embedder: Embedder,
    query: str,
    namespaces: list[str] | None,
    limit: int,
) -> list[ranking.Scored]:
    wanted = query_vector(embedder, query)
    found = vector_cache.best(store, embedder.name, embedder.dimensions, namespaces, wanted, limit)
    return [(score, ident) for score, ident in found if score >= MIN_SIMILARITY]
