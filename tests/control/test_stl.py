"""STL robustness, time grounding and the Metropolis–Hastings allocation search (polo.control.math.stl)."""
import itertools
import math

import numpy as np
import pytest
import torch

from polo.control.math.stl import (Always, And, Eventually, Not, Or, avoid, check_allocation, ground, metropolis_hastings,
                                   mh_acceptance, progress_reward, propose, reach, uniform_allocation, window_reduce)

# the spec's trajectory: A = ball((2, 1), 0.5), O = ball((1, 1.5), 0.4), H = 4
X = torch.tensor([[(0.0, 0.0), (1.0, 0.5), (2.0, 1.0), (2.5, 2.0), (3.0, 3.0)]])
A = reach((2, 1), 0.5)
O = reach((1, 1.5), 0.4)


def test_robustness_numbers():
    assert Eventually(A, 0, 4).robustness(X).item() == pytest.approx(0.5, abs=1e-4)
    assert Always(Not(O), 0, 4).robustness(X).item() == pytest.approx(0.6, abs=1e-4)
    assert Always(avoid((1, 1.5), 0.4), 0, 4).robustness(X).item() == pytest.approx(0.6, abs=1e-4)
    phi = And((Eventually(A, 0, 4), Always(Not(O), 0, 4)))
    assert phi.robustness(X).item() == pytest.approx(0.5, abs=1e-4)
    assert Eventually(A, 3, 4).robustness(X).item() == pytest.approx(-0.6180, abs=1e-4)  # wrong window


def test_grounded_robustness_number():
    g = ground(Eventually(A, 0, 4), 4)
    assert g.robustness(X, torch.tensor([[2]])).item() == pytest.approx(0.5, abs=1e-4)
    g = ground(And((Eventually(A, 0, 4), Always(Not(O), 0, 4))), 4)
    assert (g.low, g.high) == ((0,), (4,)) and len(g.invariants) == 1
    assert g.robustness(X, torch.tensor([[2]])).item() == pytest.approx(0.5, abs=1e-4)


def test_mh_acceptance_numbers():
    up = mh_acceptance(torch.tensor(0.5), torch.tensor(0.3), 0.1)
    down = mh_acceptance(torch.tensor(0.3), torch.tensor(0.5), 0.1)
    assert up.item() == pytest.approx(1.0, abs=1e-6)
    assert down.item() == pytest.approx(0.1353, abs=1e-4)
    assert down.item() == pytest.approx(math.exp(-2), abs=1e-6)
    with pytest.raises(ValueError, match="temperature"):
        mh_acceptance(torch.tensor(0.3), torch.tensor(0.5), 0.0)


def test_progress_reward_number_torch_and_numpy():
    t = progress_reward(torch.tensor([0.0, 0.0]), torch.tensor([0.6, 0.2]), torch.tensor([2.0, 1.0]))
    n = progress_reward(np.array([0.0, 0.0]), np.array([0.6, 0.2]), np.array([2.0, 1.0]))
    assert t.item() == pytest.approx(0.6236, abs=1e-4) and n == pytest.approx(0.6236, abs=1e-4)


def test_operators_and_single_sample():
    x = X[:, :2]  # H = 1, a single trajectory
    assert Or((A, O)).signal(x).shape == (1, 2)
    torch.testing.assert_close(Or((A, O)).signal(X), torch.maximum(A.signal(X), O.signal(X)))
    torch.testing.assert_close(Not(A).signal(X), -A.signal(X))
    assert Eventually(A, 0, 1).robustness(x).item() == pytest.approx(max(A.signal(x)[0]).item())


def test_window_reduce_cuts_at_the_horizon_and_fills_empty_windows():
    s = torch.tensor([[1.0, 3.0, 2.0]])
    torch.testing.assert_close(window_reduce(s, 1, 5, largest=True), torch.tensor([[3.0, 2.0, -math.inf]]))
    torch.testing.assert_close(window_reduce(s, 0, 1, largest=False), torch.tensor([[1.0, 2.0, 2.0]]))
    torch.testing.assert_close(window_reduce(s, 4, 9, largest=False), torch.full((1, 3), math.inf))
    with pytest.raises(ValueError, match="0 <= a <= b"):
        window_reduce(s, 2, 1, largest=True)


def test_bad_trajectories_are_refused():
    with pytest.raises(ValueError, match="NaN"):
        A.robustness(torch.tensor([[[0.0, float("nan")]]]))
    with pytest.raises(ValueError, match=r"\[B, H\+1, d\]"):
        A.robustness(torch.zeros(5, 2))


def test_grounding_errors():
    with pytest.raises(ValueError, match="cannot ground"):
        ground(Always(Eventually(A, 0, 2), 0, 4), 4)  # G over F
    with pytest.raises(ValueError, match="no F_"):
        ground(Always(Not(O), 0, 4), 4)
    with pytest.raises(ValueError, match="after the horizon"):
        ground(Eventually(A, 6, 8), 4)
    g = ground(Eventually(A, 0, 4), 4)
    with pytest.raises(ValueError, match="lie in"):
        g.robustness(X, torch.tensor([[5]]))
    with pytest.raises(ValueError, match="integers"):
        g.robustness(X, torch.tensor([[1.5]]))


def test_robustness_is_the_best_grounded_robustness():
    """ρ(φ) = max_τ ρ_τ on random trajectories: two F subgoals (one nesting F over G) and an invariant."""
    g = torch.Generator().manual_seed(0)
    H = 12
    x = torch.randn(64, H + 1, 2, generator=g).cumsum(1) * 0.5
    phi = And((Eventually(reach((1.0, 0.5), 0.8), 2, 9), Eventually(Always(reach((-0.5, 1.0), 1.0), 0, 2), 0, 15),
               Always(avoid((0.0, -1.5), 0.3), 0, H)))
    gr = ground(phi, H)
    assert (gr.low, gr.high) == ((2, 0), (9, 12))
    taus = torch.tensor(list(itertools.product(range(2, 10), range(0, 13))))  # every allocation
    best = torch.stack([gr.robustness(x, tau.expand(64, 2)) for tau in taus]).amax(0)
    torch.testing.assert_close(best, phi.robustness(x), atol=1e-6, rtol=0)


def test_uniform_allocations_cover_the_windows():
    low, high = torch.tensor([0, 25]), torch.tensor([20, 50])
    tau = uniform_allocation(low, high, 4000, torch.Generator().manual_seed(0))
    check_allocation(tau, (low, high), "test")
    assert set(tau[:, 0].tolist()) == set(range(0, 21)) and set(tau[:, 1].tolist()) == set(range(25, 51))


def test_proposal_is_rounded_and_clipped():
    low, high = torch.tensor([0, 25]), torch.tensor([20, 50])
    tau = torch.tensor([[0, 50], [10, 30]])
    g = torch.Generator().manual_seed(1)
    moved = torch.stack([propose(tau, 6.0, low, high, g) for _ in range(500)])
    assert moved.dtype == torch.long
    assert ((moved >= low) & (moved <= high)).all()
    torch.testing.assert_close(propose(tau, 1e-9, low, high, g), tau)


def test_chain_stays_in_the_windows_and_climbs_the_score():
    low, high = torch.tensor([0, 25]), torch.tensor([20, 50])
    target = torch.tensor([7.0, 44.0])
    score = lambda tau: -(tau - target).abs().sum(1)  # noqa: E731
    g = torch.Generator().manual_seed(0)
    start = uniform_allocation(low, high, 64, g)
    out = metropolis_hastings(score, start, low, high, sigma=3.0, temperature=0.05, steps=200, generator=g)
    for tau in (out.final, out.best):
        check_allocation(tau, (low, high), "test")
    assert (out.best_score >= -1).all() and (out.best == target.long()).all(1).float().mean() > 0.8
    assert (out.best_score >= out.final_score).all() and (out.best_score >= score(start)).all()
    assert 0 < out.acceptance < 1


def test_chain_edge_cases():
    low, high = torch.tensor([0]), torch.tensor([4])
    flat = lambda tau: torch.zeros(tau.shape[0])  # noqa: E731  all-equal scores: every proposal is accepted
    out = metropolis_hastings(flat, torch.tensor([[2]]), low, high, 1.0, 0.05, 10, torch.Generator().manual_seed(0))
    assert out.acceptance == 1.0 and out.final.shape == (1, 1)
    out = metropolis_hastings(flat, torch.tensor([[2]]), low, high, 1.0, 0.05, 0)
    assert out.final.tolist() == [[2]] and out.acceptance == 0.0
    with pytest.raises(ValueError, match="NaN"):
        metropolis_hastings(lambda tau: torch.full((tau.shape[0],), float("nan")), torch.tensor([[2]]), low, high,
                            1.0, 0.05, 3)
    with pytest.raises(ValueError, match="lie in"):
        metropolis_hastings(flat, torch.tensor([[7]]), low, high, 1.0, 0.05, 3)
    with pytest.raises(ValueError, match="must be"):
        check_allocation(torch.tensor([1, 2]), (low, high), "test")


# ---- mutation-testing kills
def test_trajectory_errors_and_avoid_ball_fields():
    with pytest.raises(ValueError, match=r"^STL robustness: the trajectory holds NaN or infinite values$"):
        A.robustness(torch.tensor([[[0.0, float("inf")]]]))
    assert avoid((1, 1.5), 0.4).inside is False and reach((2, 1), 0.5).inside is True


def test_window_reduce_single_step_window():
    s = torch.tensor([[1.0, 3.0, 2.0]])
    # [a, b] = [1, 1]: out[t] = s[t+1], cut at the horizon → the identity −∞ at t = 2
    torch.testing.assert_close(window_reduce(s, 1, 1, largest=True), torch.tensor([[3.0, 2.0, -math.inf]]))
    torch.testing.assert_close(window_reduce(s, 0, 0, largest=False), s)
    # [2, 5] cut at L−1 = 2 is the single step t' = 2 for t = 0
    torch.testing.assert_close(window_reduce(s, 2, 5, largest=True), torch.tensor([[2.0, -math.inf, -math.inf]]))


def test_grounding_at_the_horizon_and_its_error_texts():
    g = ground(Eventually(A, 4, 6), 4)  # a window that starts exactly at H is kept, cut to [4, 4]
    assert (g.low, g.high) == ((4,), (4,))
    # ρ at t = 4: A = ball((2, 1), 0.5), x_4 = (3, 3): 0.5 − √5 = −1.7361
    assert g.robustness(X, torch.tensor([[4]])).item() == pytest.approx(0.5 - math.sqrt(5), abs=1e-4)
    with pytest.raises(ValueError, match=r"^grounded robustness: allocations τ must lie in"):
        g.robustness(X, torch.tensor([[3]]))
    with pytest.raises(ValueError, match=r"^cannot ground .*\(nesting F over G at most\) and F-free invariants$"):
        ground(Eventually(Eventually(A, 0, 1), 0, 2), 4)  # F over F


def test_grounding_bounds_are_long_even_for_float_windows():
    low, high = ground(Eventually(A, 1.0, 3.0), 4).bounds()  # a window read from a config as floats
    assert low.dtype == high.dtype == torch.long and low.tolist() == [1] and high.tolist() == [3]


def test_uniform_allocation_is_the_generators_float64_draw_and_flat():
    low, high = torch.tensor([3, 25]), torch.tensor([5, 50])
    tau = uniform_allocation(low, high, 200, torch.Generator().manual_seed(7))
    u = torch.rand(200, 2, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    assert torch.equal(tau, low + (u * (high - low + 1)).floor().long())
    # 26 values in [25, 50], 26000 draws: ≈ 1000 each (std ≈ 31), the top one included
    counts = torch.bincount(uniform_allocation(low, high, 26000, torch.Generator().manual_seed(0))[:, 1] - 25)
    assert counts.numel() == 26 and counts.min() > 850 and counts.max() < 1150


def test_proposal_is_tau_plus_sigma_times_the_generators_float64_normal():
    low, high = torch.tensor([0, 25]), torch.tensor([20, 50])
    tau = torch.tensor([[10, 30], [5, 40], [15, 45], [0, 25]]).repeat(4, 1)  # 32 entries: torch's batched normal path
    out = propose(tau, 2.5, low, high, torch.Generator().manual_seed(3))
    eps = torch.randn(16, 2, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    assert torch.equal(out, (tau + 2.5 * eps).round().long().clamp(low, high))


def test_chain_is_reproducible_step_by_step_with_its_generator():
    low, high = torch.tensor([0]), torch.tensor([40])
    score = lambda tau: -0.1 * tau[:, 0].double()  # noqa: E731  downhill moves accepted with α = exp(−0.1·Δ/T)
    start = torch.full((64, 1), 20)
    out = metropolis_hastings(score, start, low, high, 3.0, 1.0, 1, torch.Generator().manual_seed(5))
    ref = torch.Generator().manual_seed(5)
    cand = propose(start, 3.0, low, high, ref)
    alpha = mh_acceptance(score(cand), score(start), 1.0)
    take = torch.rand(64, generator=ref, dtype=torch.float64) < alpha
    assert torch.equal(out.final, torch.where(take[:, None], cand, start))
    assert out.acceptance == take.float().mean().item()


def test_chain_best_keeps_the_first_of_equal_scores_and_acceptance_of_one_step():
    low, high = torch.tensor([0]), torch.tensor([40])
    flat = lambda tau: torch.zeros(tau.shape[0])  # noqa: E731  every proposal accepted, never strictly better
    out = metropolis_hastings(flat, torch.tensor([[20]]), low, high, 5.0, 1.0, 1, torch.Generator().manual_seed(0))
    assert out.acceptance == 1.0  # 1 accepted of 1 step × 1 chain
    out = metropolis_hastings(flat, torch.tensor([[20]]), low, high, 5.0, 1.0, 20, torch.Generator().manual_seed(0))
    assert out.best.tolist() == [[20]] and out.final.tolist() != [[20]]
    with pytest.raises(ValueError, match=r"^metropolis_hastings: allocations τ must lie in"):
        metropolis_hastings(flat, torch.tensor([[41]]), low, high, 1.0, 1.0, 1)
    with pytest.raises(ValueError, match=r"^metropolis_hastings: steps must be >= 0, got -1$"):
        metropolis_hastings(flat, torch.tensor([[2]]), low, high, 1.0, 1.0, -1)
