"""The order of a hybrid search's hits (portal/memory/ranking.py, issue 23), on hand-made
candidate lists: cosine leads, the full-text place adds a bonus; a note found by meaning
alone beats one found by words alone unless it is nearer by less than the bonus; a note
among near copies that the full-text list puts first wins; ties keep the full-text order;
the bonus is weighted by the cube of the rarity of the rarest query word a note holds, so a
common word earns next to none and a rare one the whole."""

from __future__ import annotations

import math
import uuid

import pytest

from webagents.portal.memory.ranking import COMMON_AT, TEXT_WEIGHT, fuse, rank, rarity

A, B, C, D, E = (uuid.UUID(int=n) for n in range(1, 6))


def test_p5_ranking_puts_a_meaning_only_first_above_a_words_only_first() -> None:
    """The case reciprocal rank fusion lost: B is found by words alone (first in full text,
    nowhere near by meaning), A by meaning alone; RRF scores them the same and took B."""
    by_text, by_meaning = [B], [(0.62, A), (0.30, C)]
    assert fuse([by_text, [i for _, i in by_meaning]]) == [B, A, C]
    assert rank(by_text, by_meaning) == [A, B, C]


def test_p5_ranking_lets_the_full_text_first_win_among_near_copies() -> None:
    """The rare word (a code) is in A alone: full text puts A first, meaning cannot tell the
    copies apart (cosines a few hundredths apart, B's a little higher): A first."""
    by_text = [A, B, C]
    by_meaning = [(0.70, B), (0.695, C), (0.69, A)]
    assert rank(by_text, by_meaning) == [A, B, C]


def test_p5_ranking_adds_the_text_bonus_by_place_one_over_n() -> None:
    """The first place adds TEXT_WEIGHT, the second half of it: C, nearer than B by more
    than B's bonus, stays above it; D, nearer by less than A's bonus, falls below A."""
    by_meaning = [(0.50, D), (0.50 - TEXT_WEIGHT / 2, A), (0.45, C), (0.45 - TEXT_WEIGHT, B)]
    by_text = [A, B]
    # A: 0.45 + 0.1 = 0.55 > D 0.50 > C 0.45 > B: 0.35 + 0.05 = 0.40
    assert rank(by_text, by_meaning) == [A, D, C, B]


def test_p5_ranking_scores_a_text_only_hit_at_the_lowest_cosine_kept() -> None:
    """D was found by words alone: no nearer than the semantic list's last (E, 0.2), plus
    its bonus at the second place (0.05), it passes C (0.24) but not B (0.26)."""
    by_meaning = [(0.9, A), (0.26, B), (0.24, C), (0.2, E)]
    assert rank([A, D], by_meaning, text_weight=0.1) == [A, B, D, C, E]


def test_p5_ranking_without_meaning_is_the_full_text_order() -> None:
    """No embedder (or it failed): the full-text list as it came, each note once."""
    assert rank([C, A, C, B], []) == [C, A, B]
    assert rank([], []) == []


def test_p5_ranking_ties_keep_the_full_text_order_then_the_semantic() -> None:
    """Equal scores: first the full-text list's order, then the semantic list's."""
    assert rank([], [(0.5, B), (0.5, A)]) == [B, A]
    tied = [(0.25, C), (0.375, D), (0.5, A)]  # with the bonuses, 0.5 each (exact in binary)
    assert rank([C, D], tied, text_weight=0.25) == [C, D, A]


def test_p5_ranking_rarity_is_one_for_a_word_in_one_note_and_zero_from_common_at() -> None:
    assert COMMON_AT == 200
    assert rarity(1, 100_000) == 1.0
    # Among min(notes, COMMON_AT) notes: a word in 10 of 100,000 as in 10 of 200.
    assert rarity(10, 100_000) == pytest.approx(math.log(20) / math.log(200))
    assert rarity(10, 100_000) == rarity(10, 200)
    assert rarity(COMMON_AT - 1, 100_000) == pytest.approx(0.0, abs=0.001)  # no step at it
    assert rarity(COMMON_AT, 100_000) == rarity(1000, 100_000) == 0.0  # common
    assert rarity(100_000, 100_000) == 0.0
    assert rarity(120, 100) == 0.0  # counts a little apart (a note forgotten meanwhile)
    assert rarity(0, 100) == 1.0  # held by none counted: as rare as can be
    assert rarity(1, 1) == rarity(0, 0) == 1.0  # one note or none: every word is rare
    assert rarity(3, 9) == pytest.approx(math.log(3) / math.log(9))  # fewer notes: among all


def test_p5_ranking_a_common_word_earns_next_to_no_bonus() -> None:
    """B, first in full text, holds only a word in a tenth of the notes it is counted among
    (rarity 0.43): its bonus is TEXT_WEIGHT * 0.43 ** 3, and A, nearer by 0.01, stays first;
    by place alone (no rarities) B's whole TEXT_WEIGHT would put it first."""
    by_meaning = [(0.50, A), (0.49, B)]
    common = rarity(COMMON_AT // 10, 100_000)
    assert common == pytest.approx(0.43, abs=0.01)
    assert rank([B], by_meaning, rarities={B: common}) == [A, B]
    assert rank([B], by_meaning) == [B, A]


def test_p5_ranking_a_rare_word_lifts_its_note_past_its_near_copies() -> None:
    """A holds the query's rare word (a name: rarity 1), first in full text; its copy B is
    nearer by meaning by 0.04 and second in full text by a common word: A's whole bonus
    passes B. By place alone B kept half of A's bonus, and the copy won."""
    by_text, by_meaning = [A, B], [(0.64, B), (0.60, A)]
    assert rank(by_text, by_meaning, rarities={A: 1.0, B: 0.2}) == [A, B]
    assert TEXT_WEIGHT - TEXT_WEIGHT / 2 < 0.04
    assert rank(by_text, by_meaning) == [B, A]


def test_p5_ranking_a_full_text_candidate_without_a_rarity_gets_no_bonus() -> None:
    """Rarities given, a candidate left out of them holds none of the query's words (as
    search counts them): B, first in full text, scores its cosine alone (0.50), and A at the
    second place with a rare word (0.49 + TEXT_WEIGHT / 2) passes it; with a rarity of 1,
    B's own first place would have kept it first."""
    by_text, by_meaning = [B, A], [(0.50, B), (0.49, A)]
    assert rank(by_text, by_meaning, rarities={A: 1.0}) == [A, B]
    assert rank(by_text, by_meaning, rarities={A: 1.0, B: 1.0}) == [B, A]
