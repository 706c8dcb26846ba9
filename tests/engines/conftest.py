"""Fixtures shared by the engine tests (a module that defines its own ``policy`` uses that one)."""
import pytest
import torch

from polo.policy.policy import build_tiny_policy
from polo.policy.tiny import TinyModelConfig


@pytest.fixture(scope="module")
def policy():
    """A tiny policy with large random weights, so that greedy decoding varies and rows stop early."""
    torch.manual_seed(0)
    policy = build_tiny_policy(TinyModelConfig(hidden_size=32, num_heads=2, intermediate_size=64))
    with torch.no_grad():
        for p in policy.model.parameters():
            if p.dim() == 2:
                p.normal_(0, 0.5)
    return policy
