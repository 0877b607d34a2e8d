"""The order of a hybrid search's hits, from its two candidate lists: the full-text list (ids,
best first) and the semantic list ((cosine, id) pairs, best first, as vector_cache.best gives).

Meaning leads and words confirm: each candidate scores its cosine with the query, plus a bonus
for its place in the full-text list: TEXT_WEIGHT at the first place, falling as 1 / place,
times the cube of the rarity of the rarest query word the note holds (`rarity`: 1 for a word
in one note of the agent's, near 0 for one in most). A note the full-text list found that
meaning did not rank scores the lowest cosine the semantic list kept (it is no nearer).

Why not reciprocal rank fusion (`fuse`, kept for comparison in bench/search_quality.py): it
sees places, not how near, so a note found by words alone and one found by meaning alone
score the same at the first place, and the tie went to the words: a paraphrase shares
meaning with its note but not words, while its words are in many other notes, and the right
note was first for 34-70% of such questions where cosine alone put it first for 94-98%
(issue 23). With the cosine kept, a note sharing words but not meaning needs the bonus to
pass one that is nearer by more than it.

Why the rarity: where the query's rare word (a code, a name) is in one note among near copies
of it (the same sentence, another name: cosines a few hundredths apart), the bonus must lift
that note past them; where the query shares only common words with notes (a paraphrase), it
must not lift those past the note meaning found. A bonus by place alone did not do both
(bench/README.md, 5,000 notes: at 0.03 a name's note lost first place to a copy for 0.08 of the
names across all namespaces; at 0.05 the paraphrases' note lost it for 0.10 more of them, one
caller). Cubed, the rarity gives a word in one note the whole bonus, one in 20 of 200 notes
0.08 of it: the rare word decides, the common ones hardly count. A word held by COMMON_AT notes
or more is common and earns nothing; the rarity of one held by fewer is measured among
min(notes, COMMON_AT) notes, so it falls to 0 as its count reaches COMMON_AT (no step there)
and, in an agent of fewer notes, is bm25's inverse document frequency among all of them. That
bound is what keeps a search cheap in a large store: each query word's notes are counted up to
COMMON_AT only, and the full-text half need not search for a common word where meaning answers
(search.candidates: in 100,000 notes such a word's matches are thousands, each ranked for a
bonus of nothing). The weight is measured too: at 0.1 a note holding a word no other note holds
passes one nearer by meaning by up to 0.1, and in a small store most words are in few notes
(tests/portal/test_memory_search_ranking.py's nine: the paraphrase's note, 0.09 nearer than one
holding "centre", lost first place); at 0.05 it stays first, and the rule met exact cosine's
recall@1 for one caller (0.72 at 5,000 notes, 0.52 at 100,000) and put the name's note first
for 0.96 across all namespaces (0.92 by place alone). It costs a count of the notes holding
each query word, up to COMMON_AT (search.holding).
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Mapping, Sequence

Scored = tuple[float, uuid.UUID]  # (cosine, id), as vector_cache.best gives

# The full-text first place, for a note holding a query word no other note holds, is worth
# this much cosine; the second place half of it, the n-th 1/n; times rarity ** RARITY_POWER.
TEXT_WEIGHT = 0.05
RARITY_POWER = 3
# A word held by this many of the agent's notes or more is common: no bonus (`rarity`), and
# its notes are counted no further (search.holding).
COMMON_AT = 200
RRF_K = 60  # reciprocal rank fusion's usual constant: 1 / (60 + rank)


def rarity(holding: int, notes: int) -> float:
    """How rare a word that `holding` of `notes` notes hold is: log(n / holding) / log(n)
    with n = min(notes, COMMON_AT), bm25's inverse document frequency scaled to 1 for a word
    in one note and 0 for one in n or more (a common word: see the module). With one note
    or none, every word is rare (1)."""
    among = min(notes, COMMON_AT)
    if among <= 1:
        return 1.0
    return min(1.0, max(0.0, math.log(among / max(1, holding)) / math.log(among)))


def rank(
    by_text: Sequence[uuid.UUID],
    by_meaning: Sequence[Scored],
    *,
    text_weight: float = TEXT_WEIGHT,
    rarities: Mapping[uuid.UUID, float] | None = None,
) -> list[uuid.UUID]:
    """Every candidate once, best first (see the module); ties keep the full-text list's order,
    then the semantic list's. `rarities`: each full-text candidate's rarity (that of the
    rarest query word it holds; a candidate not in it holds none: no bonus); None: every
    candidate's counts as 1 (the bonus by place alone). With no semantic list (no
    embedder), the full-text order."""
    if not by_meaning:
        return list(dict.fromkeys(by_text))
    cosine: dict[uuid.UUID, float] = {}
    for score, ident in by_meaning:
        cosine.setdefault(ident, score)
    floor = min(cosine.values())
    scores: dict[uuid.UUID, float] = {}
    for place, ident in enumerate(by_text, 1):
        if ident not in scores:
            rare = 1.0 if rarities is None else rarities.get(ident, 0.0)
            bonus = text_weight * rare**RARITY_POWER / place
            scores[ident] = cosine.get(ident, floor) + bonus
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
