import torch

from polo.core.advantages.optimal_token_baseline import OptimalTokenBaseline

from .helpers import build_batch, close


def otb_reference(returns, w, mask, group, eps=1e-8):
    base = torch.zeros_like(returns)
    for g in group.unique():
        rows = group == g
        if rows.sum() > 1:
            base[rows] = (returns[rows] * w[rows] * mask[rows]).sum(0) / ((w[rows] * mask[rows]).sum(0) + eps)
    return (returns - base) * mask


def test_worked_example_two_rows():
    # π = [[0.5, 0.5], [0.5, ·]], Σπ² = 0.5 everywhere: proxy 1 − 1 + 0.5 = 0.5 per token, W = [[0.5, 1], [0.5, 0]]
    # t = 0: B = (1·0.5 + 0·0.5)/1 = 0.5; t = 1: only row 0 is valid, B = 1 → A = 0
    batch = build_batch([1.0, 0.0], mask=[[1, 1], [1, 0]], old_logp=torch.full((2, 2), 0.5).log())
    batch.extras["sum_pi_sq"] = torch.full((2, 2), 0.5, dtype=torch.float64)
    close(OptimalTokenBaseline()(batch).advantages, [[0.5, 0.0], [-0.5, 0.0]])
    # zero tail: row 0 is the unique longest, so past length 1 it keeps its full return
    close(OptimalTokenBaseline(handle_zero_tail=True)(batch).advantages, [[0.5, 1.0], [-0.5, 0.0]])


def test_optimal_token_baseline_matches_per_group_loop():
    torch.manual_seed(1)
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0], [1, 1, 0, 0]])
    group = torch.tensor([0, 1, 0, 1, 2])
    probs = torch.rand(5, 4, dtype=torch.float64) * 0.9 + 0.05
    sum_pi_sq = probs**2 + (1 - probs) ** 2 / 3  # the rest spread over 3 other tokens
    batch = build_batch([1.0, 0.0, 0.0, 1.0, 0.5], group, mask=mask, old_logp=probs.log())
    batch.extras["sum_pi_sq"] = sum_pi_sq
    m = mask.double()
    w = ((1 - 2 * probs + sum_pi_sq) * m).cumsum(-1)
    returns = batch.scalar_reward()[:, None] * m
    close(OptimalTokenBaseline()(batch).advantages, otb_reference(returns, w, m, group))
    # zero tail: row 2 is its group's unique longest (4 > 3), so its position 3 keeps the full return
    tail = OptimalTokenBaseline(handle_zero_tail=True)(batch).advantages
    close(tail[2, 3], 0.0 - 0.0)
    close(tail[[0, 1, 3, 4]], OptimalTokenBaseline()(batch).advantages[[0, 1, 3, 4]])
    batch.rewards[2, 0] = 1.0
    close(OptimalTokenBaseline(handle_zero_tail=True)(batch).advantages[2, 3], 1.0)
    assert OptimalTokenBaseline()(batch).advantages[2, 3].abs() < 1e-6
    assert OptimalTokenBaseline().needs() == {"old_logp", "sum_pi_sq"}


# ---- mutation-testing kills


def half_batch(rewards, mask, group=None):
    """π = 0.5 and Σπ² = 0.5 everywhere: the proxy is 1 − 1 + 0.5 = 0.5 per valid token."""
    batch = build_batch(rewards, group, mask=mask, old_logp=torch.full(torch.as_tensor(mask).shape, 0.5).log())
    batch.extras["sum_pi_sq"] = torch.full(torch.as_tensor(mask).shape, 0.5, dtype=torch.float64)
    return batch


def test_zero_tail_starts_at_zero_next_to_an_empty_response():
    # row 1 is empty (W = 0): B_t = R_0 = 1 at both positions → A = 0; with the zero tail the second-longest
    # length is 0, so row 0's whole response gets B = 0 → A = R = 1
    batch = half_batch([1.0, 0.0], mask=[[1, 1], [0, 0]])
    close(OptimalTokenBaseline()(batch).advantages, [[0.0, 0.0], [0.0, 0.0]])
    close(OptimalTokenBaseline(handle_zero_tail=True)(batch).advantages, [[1.0, 1.0], [0.0, 0.0]])


def test_zero_tail_leaves_two_tied_longest_rows_alone():
    # lengths 2, 2, 1, R = 1, 0, 0; W = [0.5, 1] on the two long rows, [0.5, 0] on the short one.
    # t = 0: B = 1·0.5/1.5 = 1/3; t = 1: B = 1·1/2 = 0.5. No unique longest row: the zero tail changes nothing.
    expected = [[2 / 3, 0.5], [-1 / 3, -0.5], [-1 / 3, 0.0]]
    batch = half_batch([1.0, 0.0, 0.0], mask=[[1, 1], [1, 1], [1, 0]])
    close(OptimalTokenBaseline()(batch).advantages, expected)
    close(OptimalTokenBaseline(handle_zero_tail=True)(batch).advantages, expected)


def test_advantages_take_the_masks_dtype():
    # float32 rewards (so a float32 mask) with float64 policy inputs: the math runs in float32
    batch = half_batch([1.0, 0.0], mask=[[1, 1], [1, 0]])
    batch.rewards = batch.rewards.float()
    adv = OptimalTokenBaseline()(batch).advantages
    assert adv.dtype == torch.float32
    close(adv, [[0.5, 0.0], [-0.5, 0.0]])
