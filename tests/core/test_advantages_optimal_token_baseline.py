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
