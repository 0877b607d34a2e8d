"""The semantic test set (data/semantic_pairs.json): questions that find agent memory notes by
meaning alone, with no word in common (P5, M12; issue 13's acceptance: at least 20 pairs, the
local model puts the right note first for at least 80% of them)."""

from __future__ import annotations

import re

from webagents.portal.embeddings import make_embedder

from .semantic_pairs import PAIRS


def _words(text: str) -> set[str]:
    """Every word of 3 or more letters or digits, lowercased: stop words count too."""
    return {word for word in re.findall(r"[^\W_]+", text.lower()) if len(word) >= 3}


def test_p5_semantic_pairs_share_no_word_nor_a_stem() -> None:
    assert len(PAIRS) >= 24
    assert len({pair["note"] for pair in PAIRS}) == len(PAIRS)
    shared = {}
    for pair in PAIRS:
        query, note = _words(pair["query"]), _words(pair["note"])
        # A shared start of 4 letters ("travel", "travelling") is what a stemmer would match.
        stems = {
            (a, b) for a in query for b in note if len(a) >= 4 and len(b) >= 4 and a[:4] == b[:4]
        }
        if query & note or stems:
            shared[pair["query"]] = (query & note, stems)
    assert shared == {}


def test_p5_words_catches_a_shared_word_of_any_kind() -> None:
    """The check above can fail: the helper finds stop words and digits too."""
    assert _words("Where's THE key, 2029?") == {"where", "the", "key", "2029"}


def test_p5_local_model_puts_the_right_note_first_for_most_queries() -> None:
    embedder = make_embedder("local")
    assert embedder is not None
    notes = embedder.embed([pair["note"] for pair in PAIRS])
    queries = embedder.embed([pair["query"] for pair in PAIRS])
    misses = {}
    for i, query in enumerate(queries):
        scores = [sum(q * n for q, n in zip(query, note, strict=True)) for note in notes]
        best = max(range(len(notes)), key=scores.__getitem__)
        if best != i:
            misses[PAIRS[i]["query"]] = PAIRS[best]["note"]
    assert (len(PAIRS) - len(misses)) / len(PAIRS) >= 0.8, misses  # the floor
    # all-MiniLM-L6-v2 gets 29 of the 32 (90.6%); these are the three it misses.
    assert misses == {
        "Who looks after the cat when we travel?": (
            "Bruno, a three-year-old beagle, needs a walk twice daily."
        ),
        "Where do they keep spare keys?": "Always book a window place on planes, never the aisle.",
        "How does he get to the office?": (
            "Works as a nurse on night shifts at St. Mary's hospital."
        ),
    }
