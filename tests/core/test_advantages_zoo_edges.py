"""Edge cases shared by the algorithm-zoo advantage estimators: masks, degenerate groups, extreme values."""
import pytest
import torch

from polo.core.losses import PPOClip
from polo.core.registry import ADVANTAGES

from .helpers import build_batch

ZOO = ["ngrpo", "mc_grpo", "spo_tracker", "info_gae", "redippo", "oblr_weighted_baseline", "opo", "poise_probe",
       "remax", "gpg", "grpo_passk", "optimal_token_baseline", "gdpo_decoupled", "gd2po"]
PROVENANCE = {"CODE", "PAPER", "SECONDARY", "RECONSTRUCTED"}
INPUTS = {"old_logp", "ref_logp", "values", "values_privileged", "entropy_old", "sum_pi_sq", "old_dist", "ref_dist",
          "hidden", "greedy_reward", "rollout_logp", "prompt_index", "correct", "reasoning_mask", "reward_present"}
"""The inputs ``full_batch`` provides (the trainer's engine and input providers write them under these names)."""
MASK = [[1, 1, 1, 1], [1, 1, 0, 0], [0, 0, 0, 0], [1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1]]


def full_batch(rewards, group=(0, 0, 1, 1, 2, 2), mask=MASK):
    """Every extra input of the trainer's vocabulary, float64, for 6 rows in 3 pairs."""
    g = torch.Generator().manual_seed(0)
    B, T = len(mask), len(mask[0])
    probs = torch.rand(B, T, generator=g, dtype=torch.float64) * 0.9 + 0.05
    batch = build_batch(rewards, list(group), mask=mask, values=torch.rand(B, T, generator=g, dtype=torch.float64),
                        old_logp=probs.log())
    batch.reward_max = torch.tensor([1.0], dtype=torch.float64)
    batch.prompt_mask = torch.tensor([[0, 1]] * B)
    batch.prompt_ids = torch.ones(B, 2, dtype=torch.long)
    batch.extras.update(
        values_privileged=torch.rand(B, T, generator=g, dtype=torch.float64),
        entropy_old=torch.rand(B, T, generator=g, dtype=torch.float64) * 3,
        sum_pi_sq=probs**2 + (1 - probs) ** 2,
        hidden=torch.randn(B, 2 + T, 3, generator=g, dtype=torch.float64),
        greedy_reward=torch.rand(B, generator=g, dtype=torch.float64),
        prompt_index=torch.arange(B),
        correct=(torch.as_tensor(rewards) > 0.5).double(),
        reasoning_mask=batch.mask * (torch.arange(T) < T - 1),  # the last position holds the answer
        reward_present=torch.ones(B, 1, dtype=torch.bool),
    )
    return batch


@pytest.mark.parametrize("name", ZOO)
def test_registered_documented_and_needs_known_inputs(name):
    est = ADVANTAGES.build(name)
    cls = type(est)
    assert cls.__doc__ and cls.provenance in PROVENANCE
    assert "arXiv" in cls.paper
    assert est.needs() <= INPUTS


@pytest.mark.parametrize("name", ZOO)
@pytest.mark.parametrize("rewards", [[1.0, 0.0, 0.5, 0.5, 0.0, 1.0], [0.0] * 6, [1.0] * 6, [1e6, -1e6, 0, 1e-9, 3, 3]])
def test_finite_and_zero_on_padding(name, rewards):
    out = ADVANTAGES.build(name)(full_batch(rewards))
    mask = torch.tensor(MASK)
    assert out.advantages.shape == mask.shape and torch.isfinite(out.advantages).all()
    assert (out.advantages[mask == 0] == 0).all()
    if out.returns is not None:
        assert torch.isfinite(out.returns).all() and (out.returns[mask == 0] == 0).all()
    assert out.keep is None or out.keep.dtype == torch.bool and out.keep.shape == (6,)


@pytest.mark.parametrize("name", ZOO)
def test_extreme_ratios_give_finite_loss_and_gradient(name):
    batch = full_batch([1.0, 0.0, 0.0, 1.0, 1.0, 0.0])
    out = ADVANTAGES.build(name)(batch)
    batch.advantages = out.advantages
    logp = (batch.old_logp + torch.tensor([50.0, -50.0, 0.0, 30.0])).detach().requires_grad_(True)
    loss = PPOClip(clip_low=0.2, clip_high=0.28, dual_clip=3.0)(logp, batch).token_loss
    total = (loss * batch.mask).sum() / batch.mask.sum()
    total.backward()
    assert torch.isfinite(total) and torch.isfinite(logp.grad).all()


@pytest.mark.parametrize("name", ["ngrpo", "mc_grpo", "spo_tracker", "oblr_weighted_baseline", "opo", "remax", "gpg",
                                  "optimal_token_baseline", "gdpo_decoupled", "gd2po"])
def test_singleton_groups_are_finite(name):
    batch = full_batch([1.0, 0.0, 0.5, 0.5, 0.0, 1.0], group=(0, 1, 2, 3, 4, 5))
    assert torch.isfinite(ADVANTAGES.build(name)(batch).advantages).all()
