import pytest
import torch

from polo.core.advantages.ngrpo import NGRPO
from polo.core.losses import PPOClip
from polo.core.registry import ADVANTAGES, ConfigError

from .helpers import build_batch, close


def seq_adv(estimator, rewards, group=None):
    return estimator(build_batch(rewards, group)).advantages[:, 0]


@pytest.mark.parametrize(
    "rewards, expected",
    [
        ([0.0, 0.0, 0.0, 0.0], [-0.4472] * 4),  # all wrong: now negative (§12 e)
        ([1.0, 0.0, 0.0, 0.0], [1.0954, -0.7303, -0.7303, -0.7303]),
        ([1.0, 1.0, 1.0, 1.0], [0.0] * 4),  # all at r_max: zero
    ],
)
def test_spec_12_examples(rewards, expected):
    close(seq_adv(NGRPO(), rewards), expected)


def test_spec_12_asymmetric_clip_example():
    adv = torch.tensor([[1.0954, -0.4472]], dtype=torch.float64)
    logp = torch.zeros(1, 2, dtype=torch.float64)
    batch = build_batch([0.0], mask=[[1, 1]], old_logp=-torch.tensor([[1.30, 0.80]]).log(), advantages=adv)
    close(PPOClip(clip_low=0.16, clip_high=0.24)(logp, batch).token_loss, [[-1.3583, 0.3757]])


def test_matches_grpo_on_augmented_group_loop():
    rewards = torch.tensor([0.3, 1.0, 0.0, 0.5, 0.2, 0.9, 0.4], dtype=torch.float64)
    group = torch.tensor([4, 1, 4, 1, 4, 1, 1])
    est = NGRPO(r_max=1.5, n_virtual=2)
    adv = seq_adv(est, rewards, group)
    for i in range(len(rewards)):
        aug = torch.cat([rewards[group == group[i]], torch.full((2,), 1.5, dtype=torch.float64)])
        close(adv[i], (rewards[i] - aug.mean()) / (aug.std() + 1e-6))


def test_singleton_keeps_raw_reward_and_zero_virtual_is_grpo():
    close(seq_adv(NGRPO(), [0.0, 0.7], group=[0, 1]), [0.0, 0.7])
    rewards, group = [1.0, 0.0, 0.0, 2.0, 1.0], [0, 0, 0, 1, 1]
    close(seq_adv(NGRPO(n_virtual=0), rewards, group), seq_adv(ADVANTAGES.build("grpo"), rewards, group))


def test_config_rejects_negative_virtual_count():
    with pytest.raises(ConfigError, match="n_virtual"):
        ADVANTAGES.build({"name": "ngrpo", "n_virtual": -1})
