"""Hybrid search of one agent's notes: full-text and semantic candidates, ordered by
ranking.py (cosine first, a bonus for the full-text place and the rarity of the words
matched). The one place where the two databases differ in queries:

- full-text: SQLite's FTS5 table `memory_fts` (narrowed to the agent inside FTS5, then to the
  namespaces), PostgreSQL's `search_vector` tsvector column (GIN), both made by migration 0006;
  the same index counts how many of the agent's notes hold each query word a full-text
  candidate holds (up to RARITY_COUNT_CAP: more only says "common"), for its rarity;
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
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

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
# A word's notes are counted up to this many (each count a capped index read): at the cap a
# word is common, and its rarity (ranking.rarity) earns next to no bonus either way.
RARITY_COUNT_CAP = 1000
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
    # the full-text order stands (ranking.rank): nothing is read or counted for it.
    entries = store.live_by_ids(found.by_text) if found.by_meaning else {}
    rare = rarities(store, found.words, list(entries.values()))
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
    words: list[str]  # the query's words that the full-text half searched for

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
    """Up to `pool` notes from each half (bench/search_quality.py ranks them its ways too)."""
    check_storable("q", query)
    words = [w.lower() for w in _WORD.findall(query)][:MAX_QUERY_WORDS]
    if not words:
        raise BadInput("q is empty: send the words to search for", code="empty_query")
    words = [w for w in words if w not in STOP_WORDS] or words
    wanted = sorted({check_namespace(n) for n in namespaces}) if namespaces is not None else None
    by_text = _full_text(store, words, wanted, pool)
    semantic: Semantic = "off"
    by_meaning: list[ranking.Scored] = []
    if embedder is not None:
        try:
            by_meaning = _by_meaning(store, embedder, query, wanted, pool)
            semantic = "on"
        except Exception:  # a model endpoint down: full-text still answers
            log.warning("semantic search failed; answering with full-text only", exc_info=True)
            semantic = "unavailable"
    return Candidates(by_text, by_meaning, semantic, words)


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
    match = f'agent_id:"{store.agent_id.hex}"'
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
    store: MemoryStore, words: Sequence[str], found: Sequence[MemoryEntry]
) -> dict[uuid.UUID, float]:
    """Each full-text candidate's rarity (ranking.rarity): that of the rarest of `words` it
    holds, counted among the agent's live notes. A word is held where it is among the
    note's words as the full-text index takes them, near enough: \\w+ runs, lower case,
    diacritics removed (SQLite's tokenizer removes them; PostgreSQL's 'simple' keeps them,
    so there a note may be found by "café" and counted as holding "cafe": the bonus is a
    little more generous, never wrong about a word it does not hold)."""
    asked = {_folded(w) for w in words}
    held = {e.id: asked & set(_WORD.findall(_folded(_text_of(e)))) for e in found}
    needed = sorted(set().union(*held.values()))
    if not needed:
        return dict.fromkeys(held, 0.0)
    notes = store.usage().entries
    holding = {w: _holding(store, w) for w in needed}
    return {
        ident: max((ranking.rarity(holding[w], notes) for w in words_held), default=0.0)
        for ident, words_held in held.items()
    }


def _text_of(entry: MemoryEntry) -> str:
    return f"{entry.key} {entry.description} {entry.content}"


def _folded(text: str) -> str:
    return "".join(
        c for c in unicodedata.normalize("NFKD", text.lower()) if not unicodedata.combining(c)
    )


def _holding(store: MemoryStore, word: str) -> int:
    """How many of the agent's live notes hold `word`, up to RARITY_COUNT_CAP."""
    if store.on_postgresql:
        statement = _typed(
            text(
                "SELECT count(*) FROM (SELECT 1 FROM memory_entries WHERE agent_id = :agent "
                "AND deleted_at IS NULL AND search_vector @@ plainto_tsquery('simple', :word) "
                "LIMIT :cap) AS holding"
            ),
            None,
        )
        params: dict[str, object] = {"word": word, "cap": RARITY_COUNT_CAP}
    else:
        statement = text(
            "SELECT count(*) FROM (SELECT 1 FROM memory_fts WHERE memory_fts MATCH :match "
            "LIMIT :cap)"
        )
        match = f'agent_id:"{store.agent_id.hex}" AND {{key description content}}: "{word}"'
        params = {"match": match, "cap": RARITY_COUNT_CAP}
    return int(store.run(statement, params).scalar_one())


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
