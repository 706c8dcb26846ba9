import pytest
import torch

from polo.core.advantages.verl_baselines import GPG, GRPOPassK, ReMax

from .helpers import build_batch, close


def seq_adv(estimator, rewards, group=None, **extras):
    batch = build_batch(rewards, group)
    batch.extras.update({k: torch.as_tensor(v, dtype=torch.float64) for k, v in extras.items()})
    return estimator(batch).advantages[:, 0]


def test_remax_subtracts_the_greedy_reward_and_needs_it():
    close(seq_adv(ReMax(), [1.0, 0.0, 0.5], greedy_reward=[0.0, 1.0, 0.5]), [1.0, -1.0, 0.0])
    assert ReMax().needs() == {"greedy_reward"}


def test_remax_broadcasts_over_valid_tokens():
    batch = build_batch([1.0, 0.0], mask=[[1, 1, 0], [0, 0, 0]])
    batch.extras["greedy_reward"] = torch.tensor([0.25, 0.5], dtype=torch.float64)
    close(ReMax()(batch).advantages, [[0.75, 0.75, 0.0], [0.0, 0.0, 0.0]])


def test_gpg_rescales_by_the_fraction_of_samples_with_signal():
    rewards, group = [1.0, 0.0, 0.0, 0.0, 1.0, 1.0], [0, 0, 1, 1, 2, 2]  # only group 0 is mixed
    close(seq_adv(GPG(), rewards, group), [3 * 0.5, -3 * 0.5, 0, 0, 0, 0])  # α = 6/2
    close(seq_adv(GPG(valid="nonzero_reward"), rewards, group), [1.0, -1.0, 0, 0, 0, 0])  # α = 6/3 (verl)
    close(seq_adv(GPG(f_norm=2.0), rewards, group), [0.75, -0.75, 0, 0, 0, 0])


def test_gpg_singleton_counts_as_signal_and_all_equal_batch_is_zero():
    close(seq_adv(GPG(), [0.5, 1.0, 0.0], [7, 3, 3]), [0.5, 0.5, -0.5])  # α = 3/3
    assert seq_adv(GPG(), [1.0, 1.0, 0.0, 0.0], [0, 0, 1, 1]).abs().max() == 0


def test_passk_only_the_best_sample_gets_the_gap_to_the_second():
    rewards, group = [0.2, 0.9, 0.5, 1.0, 1.0, 0.0], [0, 0, 0, 1, 1, 1]
    std0 = torch.tensor([0.2, 0.9, 0.5], dtype=torch.float64).std()
    close(seq_adv(GRPOPassK(), rewards, group), [0, 0.4 / (std0 + 1e-6), 0, 0, 0, 0])  # tie at max: gap 0
    close(seq_adv(GRPOPassK(scale_by_std=False), [0.0, 1.0, 0.0, 0.0], [0, 0, 1, 1]), [0, 1, 0, 0])


def test_passk_rejects_singleton_groups():
    with pytest.raises(ValueError, match="at least 2 samples"):
        seq_adv(GRPOPassK(), [1.0, 0.0, 1.0], [0, 0, 1])
