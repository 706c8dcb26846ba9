"""A per-agent state–action critic ``Q(o_i, a_i)`` (the critic of MAPPO-PIS's released code)."""
from __future__ import annotations

import torch
from torch import Tensor, nn

from polo.control.policies.nets import ACTIVATIONS, orthogonal_linear


class AgentQNetwork(nn.Module):
    """``Q(o, a) = W₃·σ(W₂·[σ(W₁·o) ; onehot(a)])``: the discrete action enters at the second layer.

    ``forward(obs [..., n, d], action [..., n]) → [..., n]``, one value per agent from that agent's own row."""

    def __init__(self, obs_dim: int, actions: int, hidden: int, activation: str):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation {activation!r}: expected one of {', '.join(ACTIVATIONS)}")
        self.actions = actions
        self.obs_layer = orthogonal_linear(obs_dim, hidden)
        self.joint_layer = orthogonal_linear(hidden + actions, hidden)
        self.out = orthogonal_linear(hidden, 1, gain=1.0)
        self.act = ACTIVATIONS[activation]()

    def forward(self, obs: Tensor, action: Tensor) -> Tensor:
        onehot = torch.nn.functional.one_hot(action.long(), self.actions).to(obs)
        h = torch.cat([self.act(self.obs_layer(obs)), onehot], -1)
        return self.out(self.act(self.joint_layer(h))).squeeze(-1)
