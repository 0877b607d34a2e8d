"""The order of a hybrid search's hits, from its two candidate lists: the full-text list (ids,
best first) and the semantic list ((cosine, id) pairs, best first, as vector_cache.best gives).

Meaning leads and words confirm: each candidate scores its cosine with the query, plus a bonus
for its place in the full-text list (TEXT_WEIGHT at the first place, falling as 1 / place).
A note the full-text list found that meaning did not rank scores the lowest cosine the
semantic list kept (it is no nearer than that).

Why not reciprocal rank fusion (`fuse`, kept for comparison in bench/search_quality.py): it
sees places, not how near, so a note found by words alone and one found by meaning alone
score the same at the first place, and the tie went to the words: a paraphrase shares
meaning with its note but not words, while its words are in many other notes, and the right
note was first for 34-70% of such questions where cosine alone put it first for 94-98%
(issue 23). With the cosine kept, a note sharing words but not meaning needs the bonus to
pass one that is nearer by more than it; and where the query's rare word (a code, a name) is
in one note among near copies of it (the same sentence, another code: cosines a few
hundredths apart), the full-text list puts that note first (bm25 weights a rare word most;
PostgreSQL's ts_rank counts the words matched) and the bonus lifts it.
The weight is measured (bench/search_quality.py, bench/README.md): at 0.05 and more the
paraphrases' note lost first place to notes sharing their words more often than it gained
where a rare word decides; at 0.02 a name's note lost first place to its near copies.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

Scored = tuple[float, uuid.UUID]  # (cosine, id), as vector_cache.best gives

# The full-text first place is worth this much cosine, the second half of it, the n-th 1/n.
TEXT_WEIGHT = 0.03
RRF_K = 60  # reciprocal rank fusion's usual constant: 1 / (60 + rank)


def rank(
    by_text: Sequence[uuid.UUID],
    by_meaning: Sequence[Scored],
    *,
    text_weight: float = TEXT_WEIGHT,
) -> list[uuid.UUID]:
    """Every candidate once, best first (see the module); ties keep the full-text list's order,
    then the semantic list's. With no semantic list (no embedder), the full-text order."""
    if not by_meaning:
        return list(dict.fromkeys(by_text))
    cosine: dict[uuid.UUID, float] = {}
    for score, ident in by_meaning:
        cosine.setdefault(ident, score)
    floor = min(cosine.values())
    scores: dict[uuid.UUID, float] = {}
    for place, ident in enumerate(by_text, 1):
        if ident not in scores:
            scores[ident] = cosine.get(ident, floor) + text_weight / place
    for ident, score in cosine.items():
        scores.setdefault(ident, score)
    order = {ident: n for n, ident in enumerate(scores)}
    return sorted(scores, key=lambda i: (-scores[i], order[i]))


def fuse(rankings: Sequence[Sequence[uuid.UUID]]) -> list[uuid.UUID]:
    """Reciprocal rank fusion: each list gives 1 / (RRF_K + rank); ties keep first-seen order."""
    scores: dict[uuid.UUID, float] = {}
    for ranking in rankings:
        for place, ident in enumerate(ranking, 1):
            scores[ident] = scores.get(ident, 0.0) + 1.0 / (RRF_K + place)
    order = {ident: n for n, ident in enumerate(scores)}
    return sorted(scores, key=lambda i: (-scores[i], order[i]))
