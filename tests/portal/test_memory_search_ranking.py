"""Issue 23's "the right note first" through the memory store (SPEC P5), on SQLite and
PostgreSQL, with the real `local` model: a paraphrase whose words are all in other notes
(and none in its own) finds its note first, where reciprocal rank fusion put a note that
shares the words first; and a query naming a code finds the note with that code first among
near copies of it that differ only by the code. And the rarity of the words a full-text
candidate holds (search.rarities), counted among the agent's own live notes only."""

from __future__ import annotations

import pytest
from sqlalchemy.orm import Session

from webagents.portal.embeddings import Embedder, make_embedder
from webagents.portal.memory import search as searching
from webagents.portal.memory import service
from webagents.portal.memory.embedding_queue import embed_due
from webagents.portal.memory.ranking import rarity
from webagents.portal.memory.repository import MemoryStore
from webagents.portal.memory.search import search

from .memory_helpers import publish, publish_for

NOTES = {
    "sofia-booked": "sofia is booked to see the physician downtown",
    # The paraphrase's words, about other things:
    "chess-club": "the chess club meeting is scheduled for friday",
    "train-city": "the train to the city centre leaves at nine",
    "doctor-water": "the doctor said to drink more water",
    "tom-planted": "tom planted tulips along the fence",
    # The same sentence, another code: meaning cannot tell these apart.
    "alarm-1": "the alarm code for the office is jd5395",
    "alarm-2": "the alarm code for the office is kq7714",
    "alarm-3": "the alarm code for the office is pt2208",
    "alarm-4": "the alarm code for the office is vz4461",
}
PARAPHRASE = "who has a meeting scheduled with the doctor in the city centre"
CODE = "the security code of the office pt2208"


@pytest.fixture(scope="module")
def local() -> Embedder:
    embedder = make_embedder("local")
    assert embedder is not None
    return embedder


def _kept(db: Session, embedder: Embedder) -> MemoryStore:
    store = MemoryStore.for_agent(db, publish(db).scope)
    for key, content in NOTES.items():
        service.put(store, namespace="owner", key=key, content=content, by=service.BY_AGENT)
    db.commit()
    embedded = 0
    while done := embed_due(db, embedder):
        embedded += done
    assert embedded == len(NOTES)
    db.commit()
    return store


def test_p5_search_puts_the_paraphrased_note_first_above_notes_sharing_its_words(
    db: Session, local: Embedder
) -> None:
    store = _kept(db, local)
    answer = search(store, PARAPHRASE, ["owner"], limit=4, embedder=local)
    assert answer.semantic == "on"
    found = [(hit.key, hit.matched) for hit in answer.entries]
    # After the right note, the notes that share its words (their order is the databases'
    # full-text scores: bm25 on SQLite, ts_rank on PostgreSQL).
    assert (found[0], sorted(found[1:])) == (
        ("sofia-booked", ["meaning"]),
        [
            ("chess-club", ["text", "meaning"]),
            ("doctor-water", ["text", "meaning"]),
            ("train-city", ["text", "meaning"]),
        ],
    )


def test_p5_search_puts_the_note_with_the_querys_code_first_among_its_near_copies(
    db: Session, local: Embedder
) -> None:
    store = _kept(db, local)
    answer = search(store, CODE, None, limit=1, embedder=local)
    assert [(hit.key, hit.matched) for hit in answer.entries] == [("alarm-3", ["text", "meaning"])]


def test_p5_search_counts_a_words_rarity_among_the_agents_own_live_notes(
    db: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three of the agent's six live notes hold "puppy", one "Zébra" (held as "zebra", as the
    full-text index folds it); another agent's notes and a forgotten one are not counted;
    a candidate is as rare as the rarest query word it holds; a count stops at the cap."""
    agent = publish(db)
    store = MemoryStore.for_agent(db, agent.scope)
    other = MemoryStore.for_agent(db, publish_for(db, agent.owner, "other").scope)
    for n, content in enumerate(["a puppy", "a puppy", "a puppy and a Zébra", "a car", "x", "y"]):
        service.put(store, namespace="owner", key=f"n{n}", content=content, by=service.BY_AGENT)
    service.put(store, namespace="owner", key="gone", content="a zebra", by=service.BY_AGENT)
    service.delete(store, "owner", "gone", by=service.BY_AGENT)
    for n in range(4):
        service.put(other, namespace="owner", key=f"o{n}", content="a zebra", by=service.BY_AGENT)
    notes = {e.key: e for e in (store.live_entry("owner", f"n{n}") for n in range(4)) if e}
    assert store.usage().entries == 6

    found = searching.rarities(store, ["zebra", "puppy"], list(notes.values()))
    assert found == {
        notes["n0"].id: pytest.approx(rarity(3, 6)),
        notes["n1"].id: pytest.approx(rarity(3, 6)),
        notes["n2"].id: 1.0,  # its rarest word: "zebra", in one of the six
        notes["n3"].id: 0.0,  # holds none of the words
    }
    monkeypatch.setattr(searching, "RARITY_COUNT_CAP", 2)
    capped = searching.rarities(store, ["puppy"], [notes["n0"]])
    assert capped == {notes["n0"].id: pytest.approx(rarity(2, 6))}
