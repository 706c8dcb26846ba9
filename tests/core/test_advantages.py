import pytest
import torch

from polo.core.advantages import GAE, GRPO, RLOO, DrGRPO, ReinforcePP, ReinforcePPBaseline, gae
from polo.core.registry import ADVANTAGES, ConfigError

from .helpers import build_batch, close

MASK3 = [[1, 1, 1], [1, 1, 1], [1, 1, 0], [0, 0, 0]]  # a short row and a fully masked row


def seq_adv(estimator, rewards, group=None):
    return estimator(build_batch(rewards, group)).advantages[:, 0]


@pytest.mark.parametrize(
    "estimator, expected",
    [
        (GRPO(), [1.5, -0.5, -0.5, -0.5]),
        (DrGRPO(), [0.75, -0.25, -0.25, -0.25]),
        (GRPO(scale_by_std=False), [0.75, -0.25, -0.25, -0.25]),
        (RLOO(), [1.0, -1 / 3, -1 / 3, -1 / 3]),
    ],
)
def test_group_estimators_worked_examples(estimator, expected):
    close(seq_adv(estimator, [1.0, 0.0, 0.0, 0.0]), expected)


@pytest.mark.parametrize("estimator", [GRPO(), DrGRPO(), RLOO()])
def test_all_equal_group_gives_zero(estimator):
    assert seq_adv(estimator, [0.0, 0.0, 0.0, 0.0]).abs().max() == 0
    assert seq_adv(estimator, [1.0, 1.0, 1.0]).abs().max() == 0


@pytest.mark.parametrize("estimator", [GRPO(), DrGRPO(), RLOO()])
def test_singleton_group_keeps_raw_reward(estimator):
    close(seq_adv(estimator, [0.7, -2.0], group=[3, 9]), [0.7, -2.0])


def test_group_estimators_match_per_group_loops_on_unsorted_ids():
    rewards = torch.tensor([1.0, 0.3, 0.0, 2.0, 0.5, -1.0, 4.0], dtype=torch.float64)
    group = torch.tensor([7, 2, 7, 2, 7, 2, 11])  # sizes 3, 3, 1, interleaved
    grpo, rloo = seq_adv(GRPO(), rewards, group), seq_adv(RLOO(), rewards, group)
    for i in range(6):
        same = rewards[group == group[i]]
        others = (same.sum() - rewards[i]) / (len(same) - 1)
        close(grpo[i], (rewards[i] - same.mean()) / (same.std() + 1e-6))
        close(rloo[i], rewards[i] - others)


@pytest.mark.parametrize("name", ["grpo", "dr_grpo", "rloo"])
def test_sequence_advantage_broadcast_and_zero_on_mask(name):
    adv = ADVANTAGES.build(name)(build_batch([1.0, 0.0, 0.5, 2.0], mask=MASK3)).advantages
    assert adv.shape == (4, 3) and torch.isfinite(adv).all()
    assert (adv[torch.tensor(MASK3) == 0] == 0).all()
    assert (adv[0] == adv[0, 0]).all() and (adv[2, :2] == adv[2, 0]).all()


# ---------------------------------------------------------------- GAE


def test_gae_worked_example():
    batch = build_batch([1.0], mask=[[1, 1, 1, 1]], values=[[0.5, 0.6, 0.7, 0.8]])
    raw = GAE(lam=0.95, whiten=False)(batch)
    close(raw.advantages, [[0.4567, 0.3755, 0.2900, 0.2000]])
    close(raw.returns, [[0.9567, 0.9755, 0.9900, 1.0000]])
    out = GAE(lam=0.95)(batch)
    close(out.advantages, [[1.1418, 0.4067, -0.3670, -1.1815]])
    close(out.returns, raw.returns)


def test_gae_carries_value_and_advantage_over_a_masked_token():
    values = torch.tensor([[0.5, 0.6, 0.7, 0.8, 0.0]], dtype=torch.float64)
    holed = build_batch([1.0], mask=[[1, 0, 1, 1, 0]], values=values)
    compact = build_batch([1.0], mask=[[1, 1, 1]], values=values[:, [0, 2, 3]])
    for est in (GAE(gamma=0.9, lam=0.8, whiten=False), GAE(gamma=0.9, lam=0.8)):
        out, ref = est(holed), est(compact)
        close(out.advantages[:, [0, 2, 3]], ref.advantages)
        close(out.returns[:, [0, 2, 3]], ref.returns)
        assert out.advantages[0, 1] == 0 and out.advantages[0, 4] == 0


def test_gae_rows_of_different_lengths_and_fully_masked_row():
    values = torch.rand(4, 3, dtype=torch.float64)
    batch = build_batch([1.0, 0.0, 2.0, 5.0], mask=MASK3, values=values)
    out = GAE(gamma=0.99, lam=0.95, whiten=False)(batch)
    assert torch.isfinite(out.advantages).all() and (out.advantages[3] == 0).all()
    close(out.advantages[2, 1], 2.0 - values[2, 1])  # reward on the last valid token
    close(out.returns[:, -1], [1.0, 0.0, 0.0, 0.0])  # last token: returns = reward


def test_gae_kl_in_reward_and_needs():
    batch = build_batch([1.0], mask=[[1, 1]], values=[[0.0, 0.0]], old_logp=[[-1.0, -0.5]], ref_logp=[[-1.2, -0.4]])
    out = GAE(kl_coef=0.1, whiten=False)(batch)
    close(out.advantages, [[1.0 - 0.1 * (0.2 - 0.1), 1.0 + 0.1 * 0.1]])
    assert GAE().needs() == {"values"}
    assert GAE(kl_coef=0.1).needs() == {"values", "old_logp", "ref_logp"}


def test_gae_function_is_discounted_sum_without_values():
    tok_r = torch.tensor([[1.0, 2.0, 3.0]], dtype=torch.float64)
    close(gae(tok_r, torch.zeros_like(tok_r), torch.ones_like(tok_r), 0.5, 1.0), [[2.75, 3.5, 3.0]])


# ---------------------------------------------------------- REINFORCE++

RPP_EXAMPLE = dict(
    rewards=[1.0, 0.0],
    mask=[[1, 1, 1], [1, 1, 0]],
    old_logp=[[-0.5, -1.0, -0.2], [-0.3, -0.8, 0.0]],
    ref_logp=[[-0.6, -0.9, -0.2], [-0.5, -0.8, 0.0]],
)


@pytest.mark.parametrize(
    "unbiased, expected",
    [
        (False, [[0.8158, 0.8179, 0.8158], [-1.2268, -1.2227, 0.0]]),
        (True, [[0.7297, 0.7315, 0.7297], [-1.0973, -1.0936, 0.0]]),
    ],
)
def test_reinforce_pp_worked_example(unbiased, expected):
    batch = build_batch(group=[0, 1], **RPP_EXAMPLE)
    out = ReinforcePP(unbiased_var=unbiased)(batch)
    close(out.advantages, expected)
    assert out.returns is None


def test_reinforce_pp_population_variance_is_floored_not_shifted():
    # one token per row, no KL: G = R = [0, 1e-4], μ = 5e-5, population σ² = 2.5e-9 < 1e-8
    batch = build_batch([0.0, 1e-4], group=[0, 1])
    close(ReinforcePP(kl_coef=0, unbiased_var=False)(batch).advantages[:, 0], [-0.5, 0.5])  # OpenRLHF: max(σ², 1e-8)
    close(ReinforcePP(kl_coef=0)(batch).advantages[:, 0], [-0.4082, 0.4082])  # verl: sqrt(2σ² + 1e-8)
    same = build_batch([0.3, 0.3, 0.3], group=[0, 1, 2])  # zero variance: all advantages 0, finite
    assert (ReinforcePP(kl_coef=0, unbiased_var=False)(same).advantages == 0).all()


def test_reinforce_pp_baseline_subtracts_group_mean_first():
    example = dict(RPP_EXAMPLE, rewards=[3.0, 1.0, 7.0])
    example["mask"] = example["mask"] + [[1, 0, 0]]
    example["old_logp"] = example["old_logp"] + [[0.0] * 3]
    example["ref_logp"] = example["ref_logp"] + [[0.0] * 3]
    based = ReinforcePPBaseline()(build_batch(group=[4, 4, 9], **example)).advantages
    centered = ReinforcePP()(build_batch(group=[4, 4, 9], **dict(example, rewards=[1.0, -1.0, 7.0]))).advantages
    close(based, centered)


def test_reinforce_pp_needs_and_fully_masked_row():
    assert ReinforcePP().needs() == {"old_logp", "ref_logp"} and ReinforcePP(kl_coef=0).needs() == set()
    out = ReinforcePP(kl_coef=0)(build_batch([1.0, 0.0, 0.5, 2.0], mask=MASK3)).advantages
    assert torch.isfinite(out).all() and (out[3] == 0).all()


def test_unknown_kl_estimator_is_rejected_with_valid_names():
    with pytest.raises(ConfigError, match="kl_estimator.*k1, k2, k3"):
        ADVANTAGES.build({"name": "reinforce_pp", "kl_estimator": "k9"})
