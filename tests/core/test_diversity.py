"""GRUE's diversity metrics (GEM NGramStats, MSTTR): the worked example of the GRUE spec and edge cases."""
import math

import pytest

from polo.core.diversity import diversity, metric_names, msttr


def test_worked_example():
    stats = diversity(["the movie was great", "the movie was bad"])
    assert stats["distinct-1"] == pytest.approx(0.625, abs=1e-4)
    assert stats["distinct-2"] == pytest.approx(0.6667, abs=1e-4)
    assert stats["vocab_size-1"] == 5 and stats["unique-1"] == 2
    assert stats["vocab_size-2"] == 4 and stats["unique-2"] == 2  # "was great", "was bad"
    assert stats["mean_length"] == 4
    assert math.isnan(stats["msttr-100"])  # 8 tokens: no full window of 100
    assert list(stats) == metric_names()


def test_lower_cased_whitespace_tokens_and_no_ngram_across_generations():
    stats = diversity(["The  Movie\tgreat", "the movie"])
    assert stats["vocab_size-1"] == 3 and stats["unique-1"] == 1  # "the", "movie" twice each
    # bigrams: (the movie), (movie great), (the movie): "great the" would cross generations
    assert stats["vocab_size-2"] == 2 and stats["distinct-2"] == pytest.approx(2 / 3)


def test_empty_generations_count_as_length_zero():
    stats = diversity(["", "  ", "a b"])
    assert stats["mean_length"] == pytest.approx(2 / 3)
    assert stats["distinct-1"] == 1.0 and stats["vocab_size-2"] == 1
    nothing = diversity(["", ""])
    assert nothing["distinct-1"] == 0.0 and nothing["vocab_size-1"] == 0 and nothing["mean_length"] == 0


def test_character_unit():
    """Answers without spaces: one word each, but characters see their content ("bdca" vs "bdac")."""
    words = diversity(["bdca", "bdac"])
    chars = diversity(["bdca", "bd ac"], unit="chars")
    assert words["vocab_size-1"] == 2 and words["vocab_size-2"] == 0 and words["mean_length"] == 1
    assert chars["vocab_size-1"] == 4 and chars["mean_length"] == 4  # the space is left out
    # bigrams bd dc ca | bd da ac: none crosses the generations, (b d) twice
    assert chars["vocab_size-2"] == 5 and chars["unique-2"] == 4 and chars["distinct-2"] == pytest.approx(5 / 6)
    with pytest.raises(ValueError, match="unit must be one of \\['words', 'chars'\\], got 'bytes'"):
        diversity(["a"], unit="bytes")


def test_single_token():
    stats = diversity(["yes"])
    assert stats["distinct-1"] == 1.0 and stats["unique-1"] == 1 and stats["mean_length"] == 1
    assert stats["distinct-2"] == 0.0 and stats["vocab_size-2"] == 0  # no bigram at all


def test_msttr_full_windows_only():
    flat = ["a", "b", "a", "a", "c", "d", "e"]  # windows [a b a] 2/3, [a c d] 3/3; "e" dropped
    assert msttr(flat, 3) == pytest.approx((2 / 3 + 1) / 2)
    stats = diversity([" ".join(f"w{i % 50}" for i in range(250))], window=100)
    assert stats["msttr-100"] == pytest.approx(0.5)  # two full windows of 50 types each


@pytest.mark.parametrize("bad, match", [([], "no generations"), ("one text", "list of generations")])
def test_bad_inputs(bad, match):
    with pytest.raises((ValueError, TypeError), match=match):
        diversity(bad)


def test_bad_orders_and_window():
    with pytest.raises(ValueError, match=r"orders \[0\] and window 100"):
        diversity(["a"], orders=(0,))
    with pytest.raises(ValueError, match="window 0"):
        diversity(["a"], window=0)
