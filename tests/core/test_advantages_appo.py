"""APPO: the spec's appo_branch example (branching score, branch point, scale, token advantages), the greedy
branch-point selection, and the estimator's edge cases and input validation on step rows."""
import pytest
import torch

from polo.methods.appo.advantage import (APPO, GAIN_FLOOR, branch_scores, future_likelihood_gain, procedure_scale,
                                       select_branch_points)
from polo.methods.appo.brancher import TokenBranches
from polo.core.registry import ADVANTAGES

from .helpers import build_batch, close

# appo_branch (multi-turn spec §14 d)
H = [0.2, 1.5, 0.9, 2.0, 0.3, 0.1]
LAM = [0, 0.3, -0.1, 0.05, 0.4, 0.2]
OMEGA = [0.2505, 0.2690, 0.5720, 0.5800, 0.2000, 0.0]
H_HAT = [0.0526, 0.7368, 0.4211, 1.0, 0.1053, 0.0]
OMEGA_HAT = [0.4319, 0.4638, 0.9862, 1.0, 0.3448, 0.0]
BS = [0.0227, 0.3417, 0.4152, 1.0, 0.0363, 0.0]

# Step rows of the example: roots 0..3 (rewards 0, 1, 0, 0; root 0 is branched at b = 3, one row of 6 tokens),
# children 4..6 of root 0 (rewards 1, 1, 0), one row each, their first 4 tokens the forced prefix (masked).
TRAJ = [0, 1, 2, 3, 4, 5, 6]
REWARD = [0, 1, 0, 0, 1, 1, 0]
PARENT = [-1, -1, -1, -1, 0, 0, 0]
BRANCH = [7, -1, -1, -1, 7, 7, 7]
TOKEN = [4, 0, 0, 0, 0, 0, 0]
FULL, CHILD = [1] * 6, [0, 0, 0, 0, 1, 1]
MASK = [FULL, FULL, FULL, FULL, CHILD, CHILD, CHILD]
EXPECTED = [
    [-0.5, -0.5, -0.5, -0.5, -2.2320, -2.2320],
    [1.5] * 6,
    [-0.5] * 6,
    [-0.5] * 6,
    [0, 0, 0, 0, 3.2320, 3.2320],
    [0, 0, 0, 0, 3.2320, 3.2320],
    [0, 0, 0, 0, -2.2320, -2.2320],
]


def appo_batch(reward=REWARD, traj=TRAJ, step=None, parent=PARENT, branch=BRANCH, token=TOKEN, scale=2.0,
               mask=MASK, group=None, perm=None, entropy=3.0):
    N = len(traj)
    batch = build_batch(reward, [0] * N if group is None else group, mask=mask)
    batch.parent = torch.tensor(parent)
    scale = [scale] * N if isinstance(scale, float) else scale
    batch.extras.update(traj=torch.tensor(traj), step=torch.tensor([0] * N if step is None else step),
                        branch=torch.tensor(branch), branch_token=torch.tensor(token),
                        branch_scale=torch.tensor(scale, dtype=torch.float64),
                        branch_entropy=torch.tensor([entropy if b >= 0 else 0.0 for b in branch], dtype=torch.float64))
    return batch if perm is None else batch.select(perm)


def test_appo_branch_scores_point_and_scale():
    h, lam = torch.tensor(H, dtype=torch.float64), torch.tensor(LAM, dtype=torch.float64)
    omega, h_hat, omega_hat, bs = branch_scores(h, lam, window=3, gamma=0.9)
    close(omega, OMEGA)
    close(future_likelihood_gain(lam, 3, 0.9), OMEGA)
    close(h_hat, H_HAT)
    close(omega_hat, OMEGA_HAT)
    close(bs, BS)
    points = select_branch_points(bs, k=1, min_gap=16)
    assert points == [3]
    close(procedure_scale(omega_hat, points, TokenBranches().alpha), [2.0])


def test_before_the_policy_moves_entropy_alone_picks_the_branch_point():
    # Step 1: the reference is the policy, so lambda is float32 noise (~1e-6 measured). Min-max would turn that
    # noise into a [0, 1] gain and pick a low-entropy token; the score falls back to entropy (b = 3, H = 2.0)
    # and the scale to 1.
    h = torch.tensor(H, dtype=torch.float64)
    noise = torch.tensor([0.0, 9e-7, 9e-7, -9e-7, -9e-7, -9e-7], dtype=torch.float64)
    omega, h_hat, omega_hat, bs = branch_scores(h, noise, window=3, gamma=0.9)
    assert float(omega.max() - omega.min()) < GAIN_FLOOR
    close(bs, H_HAT)
    close(omega_hat, [0.0] * 6)
    assert select_branch_points(bs, 1, 1) == [3]
    close(procedure_scale(omega_hat, [3], 1.0), [1.0])
    # the plain product would have branched elsewhere: the noise decides
    assert int((h_hat * (omega - omega.min()) / (omega.max() - omega.min())).argmax()) != 3
    # per row of a batch: one trajectory moved, one did not
    two = branch_scores(torch.stack([h, h]), torch.stack([torch.tensor(LAM, dtype=torch.float64), noise]), 3, 0.9)[3]
    close(two, [BS, H_HAT])


def test_branch_point_diagnostics():
    d = APPO()(appo_batch()).diagnostics
    assert d["appo/branch_entropy_ratio"] == pytest.approx(3.0) and d["appo/branch_scale_mean"] == pytest.approx(2.0)


def test_future_likelihood_gain_matches_the_definition_and_batches():
    g = torch.Generator().manual_seed(0)
    lam = torch.randn(3, 9, generator=g, dtype=torch.float64)
    for W in (1, 2, 4, 20):
        ref = torch.zeros_like(lam)
        for k in range(9):
            for j in range(k + 1, min(k + W, 8) + 1):
                ref[:, k] += 0.8 ** (j - k - 1) * lam[:, j]
        close(future_likelihood_gain(lam, W, 0.8), ref)
    assert (future_likelihood_gain(lam, 0, 0.8) == 0).all()
    close(future_likelihood_gain(torch.tensor([0.5], dtype=torch.float64), 3, 0.9), [0.0])
    assert future_likelihood_gain(torch.zeros(0), 3, 0.9).shape == (0,)
    with pytest.raises(ValueError, match="window"):
        future_likelihood_gain(lam, -1, 0.9)


def test_branch_scores_refuse_nan_and_mismatch():
    h = torch.tensor(H, dtype=torch.float64)
    with pytest.raises(ValueError, match="lam"):
        branch_scores(h, torch.tensor([0, 0, float("nan"), 0, 0, 0], dtype=torch.float64), 3, 0.9)
    with pytest.raises(ValueError, match="shape"):
        branch_scores(h, h[:3], 3, 0.9)


def test_select_branch_points_gap_and_ties():
    bs = torch.tensor([0.5, 0.9, 0.9, 0.1, 0.8, 0.9, 0.2])
    assert select_branch_points(bs, 3, 0) == [1, 2, 5]  # ties → earlier position
    assert select_branch_points(bs, 3, 2) == [1, 5, 3]  # 2 and 0 (|Δ| < 2 from 1), 4 and 6 (from 5) ruled out
    assert select_branch_points(bs, 2, 4) == [1, 5]
    assert select_branch_points(bs, 5, 6) == [1]  # no other position is 6 tokens from 1: fewer than k
    assert select_branch_points(bs, 0, 1) == []
    assert select_branch_points(torch.zeros(4), 2, 2) == [0, 2]  # all tied: earliest first
    with pytest.raises(ValueError, match="non-finite"):
        select_branch_points(torch.tensor([0.1, float("nan")]), 1, 1)


def test_appo_branch_token_advantages_in_any_row_order():
    perm = torch.randperm(7, generator=torch.Generator().manual_seed(3))
    for order in (torch.arange(7), perm):
        out = APPO()(appo_batch(perm=order))
        close(out.advantages, torch.tensor(EXPECTED)[order])
        assert out.diagnostics["appo/branch_groups"] == 1.0
        close(torch.tensor(out.diagnostics["appo/branch_adv_abs_mean"]), 0.8660)


def test_masked_tokens_exactly_zero_deterministic_and_float32():
    batch = appo_batch()
    a, b = APPO()(batch).advantages, APPO()(batch).advantages
    assert torch.equal(a, b)
    assert (a[torch.tensor(MASK) == 0] == 0).all()
    batch.rewards = batch.rewards.float()
    batch.reward_weights = batch.reward_weights.float()
    batch.extras["branch_scale"] = batch.extras["branch_scale"].float()
    out = APPO()(batch).advantages
    assert out.dtype == torch.float32
    close(out, EXPECTED)


def test_all_equal_branch_group_gives_outcome_only():
    # Children with the original's reward 0: A^br = 0, so every token keeps its outcome advantage.
    out = APPO()(appo_batch(reward=[0, 1, 0, 0, 0, 0, 0]))
    outcome = torch.tensor([-0.5, 1.5, -0.5, -0.5, -0.5, -0.5, -0.5], dtype=torch.float64)
    close(out.advantages, outcome[:, None] * torch.tensor(MASK))
    assert out.diagnostics["appo/branch_adv_abs_mean"] == 0.0


def test_no_branches_is_trajectory_grpo_over_roots_and_single_trajectory():
    batch = appo_batch(reward=[0, 1, 0, 0], traj=[0, 1, 2, 3], parent=[-1] * 4, branch=[-1] * 4, token=[0] * 4,
                       mask=[FULL] * 4)
    out = APPO()(batch)
    close(out.advantages[:, 0], [-0.5, 1.5, -0.5, -0.5])
    assert out.diagnostics == {"appo/branch_groups": 0.0, "appo/branch_adv_abs_mean": 0.0,
                               "appo/branch_entropy_ratio": 0.0, "appo/branch_scale_mean": 0.0}
    # A lone root: mean 0, std 1 (as GRPO), so it keeps its raw reward.
    lone = APPO()(appo_batch(reward=[0.7], traj=[0], parent=[-1], branch=[-1], token=[0], mask=[FULL]))
    close(lone.advantages, [[0.7] * 6])
    # A branch group of one trajectory (no children) has nothing to compare: branch term 0.
    solo = APPO()(appo_batch(reward=[0.7], traj=[0], parent=[-1], branch=[0], token=[2], mask=[FULL]))
    close(solo.advantages, [[0.7] * 6])


def test_multi_turn_rows_groups_and_child_steps_offset():
    # Task 5: roots 10 (two turns, branched in turn 1 after column 1) and 11; child 12 of 10 has one row at turn
    # 1. Task 9 repeats the appo_branch example with other ids. The scale differs per branch group.
    traj = [10, 10, 11, 12] + [t + 20 for t in TRAJ]
    step = [0, 1, 0, 1] + [0] * 7
    parent = [-1, -1, -1, 10] + [-1, -1, -1, -1, 20, 20, 20]
    branch = [-1, 3, -1, 3] + [8] * 1 + [-1] * 3 + [8] * 3
    token = [0, 2, 0, 0] + TOKEN
    scale = [1.5] * 4 + [2.0] * 7
    reward = [1, 1, 0, 0] + REWARD
    mask = [FULL, FULL, FULL, CHILD] + MASK
    group = [5] * 4 + [9] * 7
    batch = appo_batch(reward, traj, step, parent, branch, token, scale, mask, group)
    out = APPO()(batch)
    # Task 5 roots {1, 0}: mean 0.5, std_u 0.7071 → A^out 0.7071 / −0.7071; child 12 (R 0) −0.7071.
    # Branch group {10: 1, 12: 0}: A^br ±0.7071, scaled by 1.5 → ±1.0607.
    a, b = 0.7071, 0.7071 + 1.0607
    close(out.advantages[:4], [[a] * 6, [a, a, b, b, b, b], [-a] * 6, [0, 0, 0, 0, -b, -b]])
    close(out.advantages[4:], EXPECTED)
    assert out.diagnostics["appo/branch_groups"] == 2.0


def test_refuses_bad_inputs():
    est = APPO()
    bad_reward = appo_batch(reward=[0, 1, float("nan"), 0, 1, 1, 0])
    with pytest.raises(ValueError, match="advantage appo.*non-finite"):
        est(bad_reward)
    batch = appo_batch()
    del batch.extras["branch_scale"]
    with pytest.raises(ValueError, match="advantage appo.*'branch_scale'.*has none"):
        est(batch)
    batch = appo_batch()
    batch.extras["branch_scale"][2] = float("nan")
    with pytest.raises(ValueError, match="'branch_scale'.*finite"):
        est(batch)
    batch = appo_batch()
    batch.extras["branch"] = batch.extras["branch"].double()
    with pytest.raises(ValueError, match="'branch'.*integer"):
        est(batch)
    with pytest.raises(ValueError, match="'branch_token'"):
        est(appo_batch(token=[7, 0, 0, 0, 0, 0, 0]))
    with pytest.raises(ValueError, match="branch_scale.*same"):
        est(appo_batch(scale=[2.0, 1.0, 1.0, 1.0, 2.0, 2.0, 1.5]))
    with pytest.raises(ValueError, match="not in the batch"):
        est(appo_batch(parent=[-1, -1, -1, -1, 0, 0, 9]))
    with pytest.raises(ValueError, match="task group"):
        est(appo_batch(group=[0, 0, 0, 0, 1, 1, 1]))
    with pytest.raises(ValueError, match="contiguous"):
        est(appo_batch(traj=[0, 0, 2, 3, 4, 5, 6], step=[0, 2, 0, 0, 0, 0, 0]))
    with pytest.raises(ValueError, match="several branch ids"):
        est(appo_batch(traj=[0, 0, 2, 3, 4, 5, 6], step=[0, 1, 0, 0, 0, 0, 0], branch=[7, 8, -1, -1, 7, 7, 7],
                       parent=[-1, -1, -1, -1, 0, 0, 0]))
    with pytest.raises(ValueError, match="several rows with branch_token"):
        est(appo_batch(token=[4, 0, 0, 0, 4, 0, 0]))


def test_registered():
    est = ADVANTAGES.build("appo")
    assert isinstance(est, APPO) and est.needs() == {"traj", "step", "branch", "branch_token", "branch_scale",
                                                          "branch_entropy"}
    assert type(est).provenance == "SECONDARY" and "arXiv:2606.12384" in type(est).paper
    with pytest.raises(Exception):
        APPO(unknown=1)
