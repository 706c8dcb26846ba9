"""RolloutBatch: the float mask is converted once per response_mask tensor and follows reassignment."""
import torch

from polo.core.batch import RolloutBatch


def make_batch():
    response_mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    return RolloutBatch(torch.ones(2, 2, dtype=torch.long), torch.ones(2, 2, dtype=torch.long),
                        torch.ones(2, 3, dtype=torch.long), response_mask, torch.tensor([0, 0]), torch.zeros(2))


def test_float_mask_is_cached_and_follows_a_new_response_mask():
    batch = make_batch()
    first = batch.mask
    assert first.dtype == torch.float32 and first.tolist() == [[1, 1, 0], [1, 0, 0]]
    assert batch.mask is first  # no new [B, T] tensor per access
    batch.response_mask = batch.response_mask * torch.tensor([[0], [1]])  # e.g. mask_truncated
    assert batch.mask.tolist() == [[0, 0, 0], [1, 0, 0]]
    selected = batch.select(torch.tensor([1]))
    assert selected.mask.tolist() == [[1, 0, 0]]
    batch.rewards = batch.rewards.double()
    assert batch.mask.dtype == torch.float64
