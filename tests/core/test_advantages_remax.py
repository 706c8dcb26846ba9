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


# ---- mutation-testing kills
def test_advantages_take_the_masks_dtype():
    batch = build_batch([1.0, 0.0])
    batch.rewards = batch.rewards.float()  # mask float32
    batch.extras["greedy_reward"] = torch.tensor([0.25, 0.25], dtype=torch.float64)
    adv = ReMax()(batch).advantages
    assert adv.dtype == torch.float32
    close(adv, [[0.75], [-0.25]])
