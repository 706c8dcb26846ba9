import pytest
import torch

from polo.core.advantages.grpo_passk import GRPOPassK

from .helpers import close, seq_adv


def test_passk_only_the_best_sample_gets_the_gap_to_the_second():
    rewards, group = [0.2, 0.9, 0.5, 1.0, 1.0, 0.0], [0, 0, 0, 1, 1, 1]
    std0 = torch.tensor([0.2, 0.9, 0.5], dtype=torch.float64).std()
    close(seq_adv(GRPOPassK(), rewards, group), [0, 0.4 / (std0 + 1e-6), 0, 0, 0, 0])  # tie at max: gap 0
    close(seq_adv(GRPOPassK(scale_by_std=False), [0.0, 1.0, 0.0, 0.0], [0, 0, 1, 1]), [0, 1, 0, 0])


def test_passk_rejects_singleton_groups():
    with pytest.raises(ValueError, match="at least 2 samples"):
        seq_adv(GRPOPassK(), [1.0, 0.0, 1.0], [0, 0, 1])


# ---- mutation-testing kills
def test_eps_is_added_to_a_std_smaller_than_itself_and_groups_of_one_are_refused():
    # rewards 1e-6, 0: gap 1e-6, unbiased std 1e-6/√2: A = 1/(1/√2 + 1) = 2 − √2
    close(seq_adv(GRPOPassK(), [1e-6, 0.0]), [2 - 2**0.5, 0.0], atol=1e-6)
    with pytest.raises(ValueError, match=r"^grpo_passk needs at least 2 samples per group "
                                         r"\(rollout.samples_per_prompt ≥ 2\)$"):
        seq_adv(GRPOPassK(), [1.0, 0.0], [0, 1])
