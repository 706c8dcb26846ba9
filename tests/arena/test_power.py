"""Power of the claims' paired tests (polo.arena.power): Student's t quantiles from tables, the minimum detectable
effect and the seeds that would decide a difference."""
import math

import pytest

from polo.arena.power import mde, seeds_to_decide, t_cdf, t_interval, t_quantile


@pytest.mark.parametrize("p, df, table", [
    (0.975, 1, 12.7062047), (0.975, 2, 4.3026527), (0.975, 4, 2.7764451), (0.975, 9, 2.2621572),
    (0.8, 4, 0.9409646), (0.8, 9, 0.8834039), (0.975, 30, 2.0422725), (0.995, 5, 4.0321430),
    (0.975, 1000, 1.9623391), (0.8, 100000, 0.8416248), (0.5, 3, 0.0),
])
def test_quantiles_match_the_t_tables(p, df, table):
    # published Student-t critical values (6-7 significant digits); both branches: the closed-form CDF inverted
    # by bisection (df ≤ 200) and the Cornish-Fisher expansion (df > 200)
    assert t_quantile(p, df) == pytest.approx(table, abs=2e-6)


def test_cdf_is_symmetric_and_matches_the_cauchy_and_df2_closed_forms():
    for x in (0.3, 1.0, 4.0):
        assert t_cdf(x, 1) == pytest.approx(0.5 + math.atan(x) / math.pi, abs=1e-12)      # df 1: Cauchy
        assert t_cdf(x, 2) == pytest.approx(0.5 + x / (2 * math.sqrt(2 + x * x)), abs=1e-12)
        for df in (3, 4, 7):
            assert t_cdf(-x, df) == pytest.approx(1 - t_cdf(x, df), abs=1e-12)
    assert t_cdf(0.0, 5) == 0.5


def test_mde_at_five_seeds():
    # d = 1..5: sd = sqrt(2.5) = 1.5811; (t.975,4 + t.8,4) / sqrt(5) = (2.77645 + 0.94096) / 2.23607 = 1.66248
    assert mde([1.0, 2.0, 3.0, 4.0, 5.0]) == pytest.approx(1.66248 * math.sqrt(2.5), abs=1e-4)
    assert mde([0.5]) is None


def test_seeds_to_decide_is_the_first_n_whose_mde_reaches_the_distance_from_the_threshold():
    # five differences with mean 1 and sd 1 (1 ± 1, 1 ± 1, 1): n = 10 gives (2.26216 + 0.88340)/sqrt(10) = 0.99470
    # <= 1, n = 9 gives (2.30600 + 0.88940)/3 = 1.06513 > 1
    d = [0.0, 2.0, 1.0, 0.0, 2.0]
    assert seeds_to_decide(d) == 10
    # the distance is measured from the threshold: mean 1 against t = -1 is a distance of 2 → n = 4:
    # (3.18245 + 0.97847)/2 = 2.0805 > 2 at n = 4? then n = 5: (2.77645 + 0.94096)/2.23607 = 1.6625 <= 2
    assert seeds_to_decide(d, threshold=-1.0) == 5
    assert seeds_to_decide([1.0, 1.0, 1.0]) == 2                      # no spread: decided at once
    assert seeds_to_decide([0.0, 0.0]) is None                          # exactly at the threshold: never
    assert seeds_to_decide([-1.0, 1.0, -1.0, 1.0]) is None              # mean 0
    assert seeds_to_decide([1.0]) is None
    # mean 0.00025 at sd 1.15: about (2.8 · 1.15 / 0.00025)² = 1.7e8 seeds, past MAX_SEEDS (1e5)
    assert seeds_to_decide([-1.0, 1.0, -1.0, 1.001]) is None


def test_t_interval_of_the_mean_difference():
    # d = 1..5: mean 3, sd sqrt(2.5); half-width t.975,4 · sd / sqrt(5) = 2.77645 · 0.70711 = 1.96324
    assert t_interval([1.0, 2.0, 3.0, 4.0, 5.0]) == pytest.approx((3 - 1.96324, 3 + 1.96324), abs=1e-5)
    assert t_interval([1.0, 2.0, 3.0, 4.0, 5.0], confidence=0.99)[1] == pytest.approx(3 + 4.60409 * 0.70711, abs=1e-4)
    assert t_interval([2.0]) is None


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="p must lie in"):
        t_quantile(0.3, 4)
    with pytest.raises(ValueError, match="df must be a positive integer, got 0"):
        t_cdf(1.0, 0)
