import torch

from polo.core.advantages.remax import ReMax

from .helpers import build_batch, close, seq_adv


def test_remax_subtracts_the_greedy_reward_and_needs_it():
    close(seq_adv(ReMax(), [1.0, 0.0, 0.5], greedy_reward=[0.0, 1.0, 0.5]), [1.0, -1.0, 0.0])
    assert ReMax().needs() == {"greedy_reward"}


def test_remax_broadcasts_over_valid_tokens():
    batch = build_batch([1.0, 0.0], mask=[[1, 1, 0], [0, 0, 0]])
    batch.extras["greedy_reward"] = torch.tensor([0.25, 0.5], dtype=torch.float64)
    close(ReMax()(batch).advantages, [[0.75, 0.75, 0.0], [0.0, 0.0, 0.0]])
