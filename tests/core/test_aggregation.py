import pytest
import torch

from polo.core.aggregation import StepCounts
from polo.core.registry import AGGREGATIONS

from .helpers import close

U = torch.tensor([[1.0, 2.0, 3.0, 9.0], [4.0, 9.0, 9.0, 9.0]], dtype=torch.float64)
MASK = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]])


@pytest.mark.parametrize(
    "name, expected",
    [("token_mean", 2.5), ("seq_mean_token_mean", 3.0), ("seq_mean_token_sum", 5.0), ("seq_mean_token_sum_norm", 1.25)],
)
def test_worked_example(name, expected):
    close(AGGREGATIONS.build(name)(U, MASK, StepCounts.from_mask(MASK, max_length=4)), expected)


def test_step_counts_and_explicit_l_norm():
    mask = torch.tensor([[1, 1, 0], [0, 0, 0], [1, 0, 0]])
    assert StepCounts.from_mask(mask, 7) == StepCounts(tokens=3, sequences=2, samples=3, max_length=7)
    counts = StepCounts.from_mask(MASK, max_length=100)
    close(AGGREGATIONS.build({"name": "seq_mean_token_sum_norm", "max_length": 4})(U, MASK, counts), 1.25)


@pytest.mark.parametrize("name", AGGREGATIONS.names())
@pytest.mark.parametrize("splits", [1, 2, 4])
def test_micro_batches_sum_to_full_batch_value_and_grad(name, splits):
    agg = AGGREGATIONS.build(name)
    gen = torch.Generator().manual_seed(0)
    u = torch.randn(8, 5, dtype=torch.float64, generator=gen)
    mask = (torch.rand(8, 5, generator=gen) < 0.6).long()
    mask[[1, 6]] = 0  # rows without valid tokens
    counts = StepCounts.from_mask(mask, max_length=5)

    full = u.clone().requires_grad_(True)
    agg(full, mask, counts).backward()
    micro = u.clone().requires_grad_(True)
    total = sum(agg(uc, mc, counts) for uc, mc in zip(micro.chunk(splits), mask.chunk(splits)))
    total.backward()

    close(total, agg(u, mask, counts), atol=1e-10)
    close(micro.grad, full.grad, atol=1e-10)


@pytest.mark.parametrize("name", AGGREGATIONS.names())
def test_everything_masked_gives_zero_with_grad(name):
    u = torch.randn(3, 4, requires_grad=True)
    mask = torch.zeros(3, 4)
    loss = AGGREGATIONS.build(name)(u, mask, StepCounts.from_mask(mask, max_length=4))
    loss.backward()
    assert loss.item() == 0 and loss.requires_grad and (u.grad == 0).all()
