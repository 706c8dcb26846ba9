"""The history role: frozen past iterates pushed every iteration_steps steps, most recent first, unfilled slots
holding the initial policy, and a state dict that restores order and count."""
import torch

from polo.roles.base import ROLES
from polo.policy.policy import build_tiny_policy
from polo.policy.tiny import TinyModelConfig


def weights(model):
    return next(model.parameters()).detach().clone()


def test_snapshots_are_pushed_most_recent_first():
    torch.manual_seed(0)
    policy = build_tiny_policy(TinyModelConfig(hidden_size=16, num_layers=1, num_heads=2, intermediate_size=16))
    role = ROLES.build({"name": "history", "size": 2, "iteration_steps": 2})
    history = role.build(policy)
    v0 = weights(policy)
    assert all(torch.equal(weights(m), v0) for m in history.snapshots)  # unfilled: the initial policy (reference)
    assert int(history.filled) == 0 and not any(p.requires_grad for p in history.parameters())

    def train(scale):
        with torch.no_grad():
            next(policy.parameters()).mul_(scale)
        return weights(policy)

    v1 = train(1.5)
    role.on_update(history, policy, 1)  # not an iteration boundary
    assert torch.equal(weights(history.snapshots[0]), v0)
    role.on_update(history, policy, 2)
    assert [torch.equal(weights(m), v) for m, v in zip(history.snapshots, (v1, v0))] == [True, True]
    v2 = train(0.5)
    role.on_update(history, policy, 4)
    assert [torch.equal(weights(m), v) for m, v in zip(history.snapshots, (v2, v1))] == [True, True]
    assert int(history.filled) == 2
    v3 = train(2.0)
    role.on_update(history, policy, 6)  # the oldest (v1) drops out
    assert [torch.equal(weights(m), v) for m, v in zip(history.snapshots, (v3, v2))] == [True, True]

    restored = role.build(build_tiny_policy(TinyModelConfig(hidden_size=16, num_layers=1, num_heads=2,
                                                            intermediate_size=16)))
    restored.load_state_dict(history.state_dict())
    assert [torch.equal(weights(m), v) for m, v in zip(restored.snapshots, (v3, v2))] == [True, True]
    assert int(restored.filled) == 2
