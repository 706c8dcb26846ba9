"""Arena statistics on inputs whose answers are known."""
import math

import numpy as np
import pytest

from polo.arena.stats import RESAMPLES, bootstrap_ci, bootstrap_diff_test, tiers

F64 = 1e-12
"""Absolute tolerance of float64 statistics (means, percentiles) of at most a few hundred values of magnitude
≤ 5: a sum of n terms errs by at most n·eps64·max|x| (eps64 = 2.2e-16), under 1e-12 for n ≤ 900."""


def test_bootstrap_ci_of_constant_is_a_point():
    ci = bootstrap_ci([0.4, 0.4, 0.4])
    assert (ci.mean, ci.low, ci.high) == pytest.approx((0.4, 0.4, 0.4), abs=F64)


def test_bootstrap_ci_edge_sizes():
    assert math.isnan(bootstrap_ci([]).mean)
    one = bootstrap_ci([0.7])
    assert (one.mean, one.low, one.high) == (0.7, 0.7, 0.7)


def test_bootstrap_ci_matches_normal_theory_on_large_sample():
    x = np.random.default_rng(1).normal(5.0, 2.0, size=400)
    ci = bootstrap_ci(x)
    se = x.std() / math.sqrt(len(x))
    half = 1.96 * se
    # Monte Carlo error of a 2.5% percentile of RESAMPLES bootstrap means: √(q(1−q)/R) over the density
    # there, φ(1.96)/se; ≈ 0.0024 here. Allow 4σ (measured 1.6σ).
    sigma = math.sqrt(0.025 * 0.975 / RESAMPLES) * se * math.sqrt(2 * math.pi) * math.exp(1.96**2 / 2)
    assert ci.mean == pytest.approx(x.mean(), abs=F64)
    assert ci.low == pytest.approx(x.mean() - half, abs=4 * sigma)
    assert ci.high == pytest.approx(x.mean() + half, abs=4 * sigma)


def test_bootstrap_is_reproducible_and_seeded():
    x = np.random.default_rng(3).random(30)
    assert bootstrap_ci(x) == bootstrap_ci(x)
    assert bootstrap_ci(x, resamples=200, seed=1) != bootstrap_ci(x, resamples=200, seed=2)


def test_two_values_interval_spans_them():
    ci = bootstrap_ci([0.0, 1.0])
    assert (ci.low, ci.mean, ci.high) == (0.0, 0.5, 1.0)


def test_paired_test_separates_a_consistent_gain():
    base = [0.30, 0.50, 0.40]
    better = [b + 0.05 for b in base]  # seed effects dwarf the gain, pairing removes them
    paired = bootstrap_diff_test(better, base, paired=True)
    assert paired.distinguishable and paired.diff.mean == pytest.approx(0.05, abs=F64)
    assert paired.diff.low == pytest.approx(0.05, abs=F64) and paired.p_value == 0.0
    assert not bootstrap_diff_test(better, base, paired=False).distinguishable


def test_paired_test_with_mixed_signs_is_not_significant():
    test = bootstrap_diff_test([0.5, 0.6, 0.4], [0.45, 0.65, 0.35], paired=True)
    assert not test.distinguishable
    assert test.diff.low < 0 < test.diff.high and test.p_value > 0.05


def test_identical_entries_are_not_distinguishable():
    test = bootstrap_diff_test([0.2, 0.4, 0.6], [0.2, 0.4, 0.6], paired=True)
    assert not test.distinguishable and test.p_value == 1.0


def test_unpaired_test_on_clearly_separated_samples():
    rng = np.random.default_rng(0)
    test = bootstrap_diff_test(rng.normal(1, 0.1, 20), rng.normal(0, 0.1, 20), paired=False)
    sigma = 0.1 * math.sqrt(2 / 20)  # of a difference of two 20-sample means: ≈ 0.032; allow 4σ (measured 0.8σ)
    assert test.distinguishable and test.diff.mean == pytest.approx(1, abs=4 * sigma) and test.p_value == 0.0


def test_paired_test_needs_equal_lengths():
    with pytest.raises(ValueError):
        bootstrap_diff_test([1, 2], [1], paired=True)


def test_tiers_group_by_leader():
    means = {"a": 0.9, "b": 0.85, "c": 0.5, "d": 0.45, "e": 0.1}
    far = lambda x, y: abs(means[x] - means[y]) > 0.2  # noqa: E731
    assert tiers(means, far) == {"a": 1, "b": 1, "c": 2, "d": 2, "e": 3}
    assert tiers(means, lambda x, y: False) == dict.fromkeys(means, 1)
    assert tiers(means, lambda x, y: True) == {"a": 1, "b": 2, "c": 3, "d": 4, "e": 5}
