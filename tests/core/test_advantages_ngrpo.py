import pytest
import torch

from polo.core.advantages.ngrpo import NGRPO
from polo.core.losses import PPOClip
from polo.core.registry import ADVANTAGES, ConfigError

from .helpers import build_batch, close


def seq_adv(estimator, rewards, group=None, reward_max=(1.0,), weights=None):
    """Advantages of one-token rows; the reward components' maxima default to the binary reward's 1."""
    batch = build_batch(rewards, group)
    batch.reward_max = torch.tensor(reward_max, dtype=torch.float64)
    if weights is not None:
        batch.reward_weights = torch.tensor(weights, dtype=torch.float64)
    return estimator(batch).advantages[:, 0]


@pytest.mark.parametrize(
    "rewards, expected",
    [
        ([0.0, 0.0, 0.0, 0.0], [-0.4472] * 4),  # all wrong: μ' = 0.2, σ' = 0.4472, now negative
        ([1.0, 0.0, 0.0, 0.0], [1.0954, -0.7303, -0.7303, -0.7303]),  # μ' = 0.4, σ' = 0.5477
        ([1.0, 1.0, 1.0, 1.0], [0.0] * 4),  # all at R_max: zero
    ],
)
def test_worked_examples(rewards, expected):
    close(seq_adv(NGRPO(), rewards), expected)
    close(seq_adv(NGRPO(r_max=1.0), rewards, reward_max=(float("inf"),)), expected)  # explicit r_max wins


def test_r_max_is_the_maximum_of_the_weighted_scalar_reward():
    # components correct (max 1) and digit_match (max 0.5), weights 1, 1: R_max = 1.5
    # scalar rewards [1.5, 0, 0.5, 0] ∪ {1.5}: μ' = 0.7, σ'² = 2.3/4 = 0.575, σ' = 0.7583
    rewards = [[1.0, 0.5], [0.0, 0.0], [0.0, 0.5], [0.0, 0.0]]
    close(seq_adv(NGRPO(), rewards, reward_max=(1.0, 0.5)), [1.0550, -0.9231, -0.2638, -0.9231])
    close(seq_adv(NGRPO(), rewards, reward_max=(1.0, 0.5)), seq_adv(NGRPO(r_max=1.5), rewards))
    # weights 2, 1 on maxima 1, 0.5: R_max = 2.5; scalar [2, 0] ∪ {2.5}: μ' = 1.5, σ'² = 3.5/2, σ' = 1.3229
    close(seq_adv(NGRPO(), [[1.0, 0.0], [0.0, 0.0]], reward_max=(1.0, 0.5), weights=(2.0, 1.0)), [0.3780, -1.1339])
    # a weight-0 component does not count, even if unbounded
    close(seq_adv(NGRPO(), rewards, reward_max=(1.0, float("inf")), weights=(1.0, 0.0)),
          seq_adv(NGRPO(r_max=1.0), rewards, weights=(1.0, 0.0)))


def test_unknown_maximum_asks_for_r_max():
    with pytest.raises(ValueError, match=r"r1.*no finite maximum.*advantage\.r_max"):
        seq_adv(NGRPO(), [[1.0, 3.0], [0.0, 0.0]], reward_max=(1.0, float("inf")))
    with pytest.raises(ValueError, match=r"r1.*negative weight.*advantage\.r_max"):
        seq_adv(NGRPO(), [[1.0, 1.0], [0.0, 0.0]], reward_max=(1.0, 1.0), weights=(1.0, -0.5))
    with pytest.raises(ValueError, match="finite"):
        seq_adv(NGRPO(r_max=float("inf")), [1.0, 0.0])


def test_asymmetric_clip_example():
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


def test_broadcast_over_tokens_and_zero_on_padding():
    batch = build_batch([1.0, 0.0], mask=[[1, 1, 0], [0, 0, 0]])
    batch.reward_max = torch.tensor([1.0], dtype=torch.float64)
    adv = NGRPO()(batch).advantages
    assert (adv[0, :2] == adv[0, 0]).all() and adv[0, 2] == 0 and (adv[1] == 0).all()


def test_config_rejects_negative_virtual_count():
    with pytest.raises(ConfigError, match="n_virtual"):
        ADVANTAGES.build({"name": "ngrpo", "n_virtual": -1})


# ---- mutation-testing kills


def test_flat_row_metrics_count_groups_of_equal_rewards_and_those_still_learning():
    # groups: g0 [0, 0] flat, A = −(1/3)/√(1/3) ≠ 0 (learns); g1 [1, 1, 1] flat at R_max, A = 0;
    # g2 [0.7] a singleton (not flat: count 1, A = R = 0.7); g3 [1, 0] not flat (σ = 0.707)
    batch = build_batch([0.0, 0.0, 1.0, 1.0, 1.0, 0.7, 1.0, 0.0], group=[0, 0, 1, 1, 1, 2, 3, 3])
    batch.reward_max = torch.tensor([1.0], dtype=torch.float64)
    out = NGRPO()(batch)
    close(out.advantages[:2, 0], [-(1 / 3) / (1 / 3) ** 0.5] * 2)
    assert out.diagnostics["ngrpo/flat_rows"] == pytest.approx(5 / 8)  # g0 and g1
    assert out.diagnostics["ngrpo/flat_rows_learning"] == pytest.approx(2 / 8)  # g0 only


def test_eps_is_added_to_the_augmented_std():
    # all wrong, R_max = 1: μ' = 0.2, σ' = √0.2 = 0.44721; A = −0.2/(0.44721 + 0.5) = −0.21115
    close(seq_adv(NGRPO(eps=0.5), [0.0, 0.0, 0.0, 0.0]), [-0.2 / (0.2**0.5 + 0.5)] * 4)


def test_error_messages_list_every_offending_component_and_an_infinite_r_max():
    with pytest.raises(ValueError, match=r"component\(s\) r1, r2 declare no finite maximum"):
        seq_adv(NGRPO(), [[1.0, 3.0, 2.0], [0.0, 0.0, 0.0]], reward_max=(1.0, float("inf"), float("inf")))
    with pytest.raises(ValueError, match=r"component\(s\) r0, r2 have negative weight"):
        seq_adv(NGRPO(), [[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]], reward_max=(1.0, 1.0, 1.0), weights=(-1.0, 1.0, -0.5))
    # the config refuses r_max = inf, but calibrated() is public and checks its argument itself
    reward = torch.tensor([1.0, 0.0], dtype=torch.float64)
    with pytest.raises(ValueError, match=r"ngrpo: advantage\.r_max must be finite, got inf"):
        NGRPO().calibrated(reward, torch.zeros(2, dtype=torch.long), float("inf"))
