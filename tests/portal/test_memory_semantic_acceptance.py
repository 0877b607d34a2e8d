"""Issue 13's semantic search acceptance through the memory store itself (SPEC P5), on SQLite
and PostgreSQL: the 32 pairs of data/semantic_pairs.json kept as one agent's notes, embedded
through the store's queue by the real `local` model, then found by the store's hybrid search
(full-text and meaning fused) and by the HTTP API: the right note first for at least 80% of
the queries. With no embedder (`--embeddings none`) the answer says semantic search is off."""

from __future__ import annotations

import re
from typing import Any

import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from webagents.portal.embeddings import Embedder, make_embedder
from webagents.portal.memory import service
from webagents.portal.memory.embedding_queue import embed_due
from webagents.portal.memory.repository import MemoryStore
from webagents.portal.memory.search import search
from webagents.portal.settings import PortalSettings

from .memory_helpers import Published, publish
from .semantic_pairs import PAIRS
from .store_api_helpers import URL, store_client

FLOOR = 0.8  # the issue's: the right note first for at least 80% of the queries
THROUGH_HTTP = 6  # the first queries asked through the API too


@pytest.fixture(scope="module")
def local() -> Embedder:
    embedder = make_embedder("local")
    assert embedder is not None
    return embedder


def _key(i: int) -> str:
    """The note's name as an agent would give it: its first words (so, like the note, it shares
    no word with the query). A name that says nothing ("n07") would be embedded with the note
    as noise: all-MiniLM-L6-v2 then finds 26 of the 32 instead of 29."""
    return "-".join(re.findall(r"[a-z0-9]+", PAIRS[i]["note"].lower())[:3])


KEYS = {_key(i): i for i in range(len(PAIRS))}


def _kept(db: Session, embedder: Embedder | None) -> tuple[Published, MemoryStore]:
    """One agent's store holding every pair's note in `owner`, embedded when `embedder`."""
    published = publish(db)
    store = MemoryStore.for_agent(db, published.scope)
    for i, pair in enumerate(PAIRS):
        service.put(
            store, namespace="owner", key=_key(i), content=pair["note"], by=service.BY_AGENT
        )
    db.commit()
    if embedder is not None:
        embedded = 0
        while done := embed_due(db, embedder):
            embedded += done
        assert embedded == len(PAIRS)
        db.commit()
    return published, store


def _first(answer: dict[str, Any]) -> str | None:
    entries = answer["entries"]
    return str(entries[0]["key"]) if entries else None


def _ask(api: Any, published: Published, query: str) -> dict[str, Any]:
    params = {"action": "search", "q": query, "namespace": "owner", "limit": 5}
    answer = api.get(URL, headers=published.headers, params=params)
    assert answer.status_code == 200, answer.text
    found: dict[str, Any] = answer.json()
    return found


@pytest.mark.pgvector  # and ranked by the database where it has pgvector
def test_p5_semantic_search_through_the_store_finds_the_note_by_meaning(
    settings: PortalSettings, migrated_engine: Engine, db: Session, local: Embedder
) -> None:
    published, store = _kept(db, local)
    misses: dict[str, tuple[str, str]] = {}
    for i, pair in enumerate(PAIRS):
        answer = search(store, pair["query"], ["owner"], limit=5, embedder=local)
        assert answer.semantic == "on"
        first = answer.entries[0].key if answer.entries else None
        if first != _key(i):
            wrong = PAIRS[KEYS[first]]["note"] if first else "(nothing)"
            misses[pair["query"]] = (pair["note"], wrong)
    for query, (wanted, found) in misses.items():
        print(f"miss: {query!r} wanted {wanted!r}, found first {found!r}")
    right = len(PAIRS) - len(misses)
    print(f"hybrid search put the right note first for {right} of {len(PAIRS)}")
    assert right / len(PAIRS) >= FLOOR, misses
    with store_client(settings, migrated_engine, db, local) as api:
        for i, pair in enumerate(PAIRS[:THROUGH_HTTP]):
            over_http = _ask(api, published, pair["query"])
            assert over_http["semantic"] == "on"
            through_store = search(store, pair["query"], ["owner"], limit=5, embedder=local)
            assert [e["key"] for e in over_http["entries"]] == [
                e.key for e in through_store.entries
            ]
            if pair["query"] not in misses:
                assert _first(over_http) == _key(i)


def test_p5_semantic_search_with_embeddings_none_says_it_is_off(
    settings: PortalSettings, migrated_engine: Engine, db: Session
) -> None:
    published, store = _kept(db, None)
    # "Who looks after the cat when we travel?": its note shares no word with it, but the
    # passport's note says "Travel": full-text alone finds that one, and only that one.
    query = PAIRS[7]["query"]
    answer = search(store, query, ["owner"], limit=5, embedder=None)
    assert answer.semantic == "off"
    assert [(hit.key, hit.matched) for hit in answer.entries] == [(_key(13), ["text"])]
    with store_client(settings, migrated_engine, db, None) as api:
        over_http = _ask(api, published, query)
    assert over_http["semantic"] == "off"
    assert [(e["key"], e["matched"]) for e in over_http["entries"]] == [(_key(13), ["text"])]
