"""Search's vectors kept per process, on SQLite and PostgreSQL: brought up to date by the rows
that changed (no reload after each batch of embeddings), finding what a fresh read finds, and
bounded by bytes (WEBAGENTS_PORTAL_VECTOR_CACHE_MB), the agent searched longest ago dropped
first."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy.orm import Session

from webagents.portal.memory import search as searching
from webagents.portal.memory import service, vector_cache
from webagents.portal.memory.embedding_queue import embed_due
from webagents.portal.memory.repository import MemoryStore

from .memory_helpers import SynonymEmbedder, publish, publish_for

BOB = ["caller:bob", "shared"]


def _put(store: MemoryStore, namespace: str, key: str, content: str) -> None:
    service.put(store, namespace=namespace, key=key, content=content, by=service.BY_AGENT)


def _found(
    store: MemoryStore, embedder: SynonymEmbedder, query: str, namespaces: list[str] | None
) -> list[tuple[str, str, list[str]]]:
    answer = searching.search(store, query, namespaces, embedder=embedder)
    assert answer.semantic == "on"
    return [(e.namespace, e.key, list(e.matched)) for e in answer.entries]


def test_p5_search_keeps_its_vectors_up_to_date_by_the_rows_that_changed(db: Session) -> None:
    agent = publish(db)
    store = MemoryStore.for_agent(db, agent.scope)
    embedder = SynonymEmbedder()
    _put(store, "caller:bob", "pets", "a puppy")
    _put(store, "caller:bob", "cars", "a car")
    _put(store, "shared", "trip", "a holiday")
    _put(store, "caller:eve", "eves", "a hound")
    embed_due(db, embedder)
    loads = vector_cache.counts.loads

    def searches() -> list[list[tuple[str, str, list[str]]]]:
        return [
            _found(store, embedder, "dog", BOB),
            _found(store, embedder, "vehicle", BOB),
            _found(store, embedder, "money", BOB),
            _found(store, embedder, "dog", None),
        ]

    assert searches() == [
        [("caller:bob", "pets", ["meaning"])],
        [("caller:bob", "cars", ["meaning"])],
        [],
        [("caller:bob", "pets", ["meaning"]), ("caller:eve", "eves", ["meaning"])],
    ]
    assert vector_cache.counts.loads == loads + 2  # bob's and shared; then the rest

    refreshes = vector_cache.counts.refreshes
    _put(store, "shared", "budget", "cash")  # new
    _put(store, "caller:bob", "pets", "a sedan")  # changed meaning
    service.delete(store, "caller:bob", "cars", by=service.BY_AGENT)  # forgotten
    _put(store, "caller:zed", "zeds", "a puppy")  # a namespace the cache has not seen
    embed_due(db, embedder)
    expected = [
        [],  # bob's: no dog there any more
        [("caller:bob", "pets", ["meaning"])],
        [("shared", "budget", ["meaning"])],
        [("caller:eve", "eves", ["meaning"]), ("caller:zed", "zeds", ["meaning"])],
    ]
    assert searches() == expected
    assert vector_cache.counts.loads == loads + 2  # no reload: the changed rows only
    assert vector_cache.counts.refreshes == refreshes + 1

    vector_cache.clear()  # what a fresh read finds is the same
    assert searches() == expected


def test_p5_search_vectors_are_bounded_by_bytes_the_oldest_searched_dropped_first(
    db: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    embedder = SynonymEmbedder()
    row = embedder.dimensions * 4 + vector_cache.ROW_OVERHEAD
    monkeypatch.setenv(vector_cache.LIMIT_ENV, str(12 * row / 2**20))  # room for 12 rows
    vector_cache.clear()
    first = publish(db, "alice", "first")
    stores = {"first": MemoryStore.for_agent(db, first.scope)}
    for name in ("second", "third", "big"):
        stores[name] = MemoryStore.for_agent(db, publish_for(db, first.owner, name).scope)
    for name, store in stores.items():
        for n in range(20 if name == "big" else 5):
            _put(store, "owner", f"{name}-{n}", "a puppy" if n == 3 else f"note {n}")
    embed_due(db, embedder, limit=100)

    def search(name: str) -> list[tuple[str, str, list[str]]]:
        return _found(stores[name], embedder, "dog", ["owner"])

    def kept() -> list[str]:
        agents = {store.agent_id: name for name, store in stores.items()}
        return [agents[agent] for agent, _ in vector_cache.cached()]

    assert search("first") == [("owner", "first-3", ["meaning"])]
    assert search("second") == [("owner", "second-3", ["meaning"])]
    assert kept() == ["first", "second"]
    assert search("third") == [("owner", "third-3", ["meaning"])]
    assert kept() == ["second", "third"]  # 15 rows passed 12: the oldest searched went
    assert search("first") == [("owner", "first-3", ["meaning"])]
    assert kept() == ["third", "first"]
    assert search("big") == [("owner", "big-3", ["meaning"])]  # read, used, not kept
    assert kept() == ["third", "first"]
    assert sum(vector_cache.cached().values()) == 10 * row


def test_p5_a_repeated_query_runs_the_model_once(db: Session) -> None:
    agent = publish(db)
    store = MemoryStore.for_agent(db, agent.scope)
    embedder = SynonymEmbedder()
    _put(store, "owner", "pets", "a puppy")
    embed_due(db, embedder)
    asked = [f"dog {uuid.uuid4().hex}", f"car {uuid.uuid4().hex}"]
    found = [_found(store, embedder, q, ["owner"]) for q in (asked[0], asked[1], asked[0])]
    assert found == [[("owner", "pets", ["meaning"])], [], [("owner", "pets", ["meaning"])]]
    assert embedder.calls[1:] == [[asked[0]], [asked[1]]]
