"""CIPO's skill mining: the spec's cipo_mining example, ranking ties, overlapping counts and bad settings."""
import pytest

from polo.methods.cipo.skill_mining import mine_skills, skill_candidates

# cipo_mining (multi-turn spec §15 d)
SEQS = [["search", "open", "read", "answer"],
        ["search", "open", "read", "search", "open", "read", "answer"],
        ["list", "open", "read", "answer"]]


def test_cipo_mining_top_candidates_and_budget():
    top = skill_candidates(SEQS)[:5]
    assert top == [(("open", "read", "answer"), 3, 6), (("search", "open", "read"), 3, 6),
                   (("open", "read"), 4, 4), (("read", "answer"), 3, 3), (("search", "open"), 3, 3)]
    assert mine_skills(SEQS, k=2) == [("open", "read", "answer"), ("search", "open", "read")]
    assert mine_skills(SEQS) == [gram for gram, _, _ in skill_candidates(SEQS)[:8]]


def test_overlapping_and_repeated_occurrences_all_count():
    # a a a a: (a, a) occurs at positions 0, 1, 2 (overlapping); (a, a, a) at 0 and 1.
    assert skill_candidates([["a", "a", "a", "a"]]) == [(("a", "a", "a"), 2, 4), (("a", "a"), 3, 3)]


def test_ties_longer_first_then_lexicographic():
    # (x, y, z) scores 2; every pair occurs once and scores 1: longer first, then the names in order.
    cands = skill_candidates([["x", "y", "z"], ["b", "c"], ["a", "b"]])
    assert [g for g, _, _ in cands] == [("x", "y", "z"), ("a", "b"), ("b", "c"), ("x", "y"), ("y", "z")]


def test_n_max_and_short_or_empty_sequences():
    assert all(len(g) == 2 for g in mine_skills(SEQS, n_max=2, k=100))
    assert max(len(g) for g in mine_skills(SEQS, n_max=5, k=100)) == 5  # the 7-call sequence holds 5-grams
    assert mine_skills([[], ["only"]]) == [] and mine_skills([]) == [] and mine_skills(SEQS, k=0) == []


def test_deterministic_and_order_independent_of_sequence_order():
    assert mine_skills(SEQS) == mine_skills(SEQS[::-1]) == mine_skills(SEQS)


@pytest.mark.parametrize("kwargs, match", [({"n_max": 1}, "n_max"), ({"k": -1}, "k must")])
def test_bad_settings_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        mine_skills(SEQS, **kwargs)


def test_a_string_is_not_a_sequence_of_tools():
    with pytest.raises(ValueError, match="list of tool names"):
        mine_skills(["search open read"])
