"""RL4LMs' adaptive KL controller and per-token KL-in-reward (GRUE; NLPO) against polo's existing code, with the
worked examples of the GRUE and NLPO specs: ``β ← β·(1 + 0.1·clip((KL − KL_tgt)/KL_tgt, −0.2, 0.2))`` is
``KlCoefficients`` with samples per step / horizon = 0.1 (nlpo.yaml: 512 / 5120), and
``r_t = −β·(log π − log π_ref) + 1[t=T]·R`` is ``TokenRewardAdvantage.token_rewards`` with the k1 estimator."""
import math

import pytest
import torch

from polo.core.registry import ADVANTAGES
from polo.train.kl_control import KlCoefficients

from tests.core.helpers import build_batch, close


def rl4lms(beta: float, target: float, *, in_reward: bool) -> KlCoefficients:
    """Coefficients adapted as RL4LMs does (B / horizon = 0.1); the penalty in the reward or in the loss."""
    return KlCoefficients(0.0 if in_reward else beta, beta if in_reward else 0.0, target, horizon=5120,
                          batch_size=512)


@pytest.mark.parametrize("in_reward, key", [(True, "kl/behaviour_ref"), (False, "policy/kl_ref")])
def test_adaptive_beta_grue_example(in_reward, key):
    kl = rl4lms(0.1, 0.1, in_reward=in_reward)
    assert kl.adapt({key: 0.3})["kl/coef"] == pytest.approx(0.1020, abs=1e-4)  # e = +0.2 (clipped from 2)
    assert kl.adapt({key: 0.05})["kl/coef"] == pytest.approx(0.09996, abs=1e-6)  # e = −0.2 (−0.5 clipped)


def test_adaptive_beta_nlpo_example():
    up, down = rl4lms(0.1, 1.0, in_reward=True), rl4lms(0.1, 1.0, in_reward=True)
    assert up.adapt({"kl/behaviour_ref": 1.5})["kl/coef"] == pytest.approx(0.1020, abs=1e-4)
    assert down.adapt({"kl/behaviour_ref": 0.5})["kl/coef"] == pytest.approx(0.0980, abs=1e-4)


def test_no_target_or_no_observation_leaves_beta():
    assert KlCoefficients(0.0, 0.1, None).adapt({"kl/behaviour_ref": 5.0}) == {}
    kl = rl4lms(0.1, 0.1, in_reward=True)
    assert kl.adapt({}) == {} and kl.reward == 0.1


def gae_token_rewards(logp, ref_logp, reward, beta, mask=None):
    estimator = ADVANTAGES.build({"name": "gae", "kl_coef": beta, "kl_estimator": "k1"})
    batch = build_batch([[reward]], mask=[[1] * len(logp)] if mask is None else mask,
                        old_logp=[logp], ref_logp=[ref_logp])
    return estimator.token_rewards(batch, batch.scalar_reward())[0]


def test_per_token_reward_grue_example():
    close(gae_token_rewards([-1.0, -0.5, -2.0], [-1.2, -0.5, -1.5], 0.9, 0.1), [-0.02, 0.0, 0.95])


def test_per_token_reward_nlpo_example():
    logp = [math.log(p) for p in (0.375, 0.5, 0.4)]
    ref = [math.log(p) for p in (0.3, 0.5, 0.5)]
    close(gae_token_rewards(logp, ref, 1.0, 0.1), [-0.0223, 0.0, 1.0223])


def test_per_token_reward_masked_tail():
    """The task reward lands on the last valid token; padding gets neither reward nor penalty."""
    r = gae_token_rewards([-1.0, -0.5, -2.0], [-1.2, -0.5, -1.5], 0.9, 0.1, mask=[[1, 1, 0]])
    close(r, [-0.02, 0.9, 0.0])
    assert torch.isfinite(r).all()
