"""Issue 23's "the right note first" through the memory store (SPEC P5), on SQLite and
PostgreSQL, with the real `local` model: a paraphrase whose words are all in other notes
(and none in its own) finds its note first, where reciprocal rank fusion put a note that
shares the words first; and a query naming a code finds the note with that code first among
near copies of it that differ only by the code. And the rarity of the words a full-text
query word (search.holding), counted among the agent's own live notes only, and the common
words left to meaning where meaning answers."""

from __future__ import annotations

import pytest
from sqlalchemy.orm import Session

from webagents.portal.embeddings import Embedder, make_embedder
from webagents.portal.memory import ranking, service
from webagents.portal.memory import search as searching
from webagents.portal.memory.embedding_queue import embed_due
from webagents.portal.memory.ranking import rarity
from webagents.portal.memory.repository import MemoryStore
from webagents.portal.memory.search import search

from .memory_helpers import SynonymEmbedder, publish, publish_for

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


def test_p5_search_counts_a_words_notes_among_the_agents_own_live_notes(
    db: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three of the agent's six live notes hold "puppy", one "Zébra" (held as "zebra", as the
    full-text index folds it); another agent's notes and a forgotten one are not counted; a
    count stops at ranking.COMMON_AT; a candidate is as rare as the rarest counted word it
    holds."""
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

    counted = searching.holding(store, ["zebra", "puppy", "kitten"])
    # PostgreSQL's 'simple' configuration keeps the diacritic: its index holds "zébra", and
    # "zebra" is counted in none (as rare as can be: the same rarity, 1).
    assert counted == {"zebra": 0 if store.on_postgresql else 1, "puppy": 3, "kitten": 0}
    found = searching.rarities(counted, 6, list(notes.values()))
    assert found == {
        notes["n0"].id: pytest.approx(rarity(3, 6)),
        notes["n1"].id: pytest.approx(rarity(3, 6)),
        notes["n2"].id: 1.0,  # its rarest word: "zebra", in one of the six
        notes["n3"].id: 0.0,  # holds none of the words
    }
    monkeypatch.setattr(ranking, "COMMON_AT", 2)
    assert searching.holding(store, ["puppy", "car"]) == {"puppy": 2, "car": 1}


def _puppies(db: Session, embedder: Embedder | None) -> MemoryStore:
    """Four notes holding "puppy" (common where ranking.COMMON_AT is 3), one "zebra"; their
    vectors kept where an embedder is given."""
    store = MemoryStore.for_agent(db, publish(db).scope)
    contents = ["a puppy at home", "a puppy in the car", "the puppy sleeps", "my puppy"]
    for n, content in enumerate([*contents, "a zebra and a dog"]):
        service.put(store, namespace="owner", key=f"n{n}", content=content, by=service.BY_AGENT)
    db.commit()
    while embedder is not None and embed_due(db, embedder):
        pass
    db.commit()
    return store


def test_p5_search_leaves_a_common_word_to_meaning_where_meaning_answers(
    db: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ "puppy" is in four notes, common at a COMMON_AT of 3: the full-text half searches for
    "zebra" alone, meaning finds the puppies (a dog's sense), and their hits say so: found by
    meaning, not by text. Every note is still answered, the zebra's first (its rare word)."""
    monkeypatch.setattr(ranking, "COMMON_AT", 3)
    embedder = SynonymEmbedder()
    store = _puppies(db, embedder)
    found = searching.candidates(store, "puppy zebra", ["owner"], pool=30, embedder=embedder)
    assert found.semantic == "on"
    assert found.holding == {"puppy": 3, "zebra": 1}
    assert [store.live_by_ids([i])[i].key for i in found.by_text] == ["n4"]
    assert len(found.by_meaning) == 5

    answer = search(store, "puppy zebra", ["owner"], limit=10, embedder=embedder)
    matched = {hit.key: hit.matched for hit in answer.entries}
    assert answer.entries[0].key == "n4"
    assert matched == {"n4": ["text", "meaning"], **{f"n{n}": ["meaning"] for n in range(4)}}


def test_p5_search_searches_every_word_by_text_where_meaning_does_not_answer(
    db: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same notes and query with no embedder, and with one whose vectors are not kept yet
    (meaning finds nothing): every word is searched by text, the common one too, since the
    full-text order is then the answer."""
    monkeypatch.setattr(ranking, "COMMON_AT", 3)
    store = _puppies(db, None)
    for embedder in (None, SynonymEmbedder()):
        answer = search(store, "puppy zebra", ["owner"], limit=10, embedder=embedder)
        assert answer.semantic == ("off" if embedder is None else "on")
        assert sorted(hit.key for hit in answer.entries) == [f"n{n}" for n in range(5)]
        assert all(hit.matched == ["text"] for hit in answer.entries)
