"""The critic of the on-policy control methods: an MLP state-value function."""
from __future__ import annotations

from pydantic import Field
from torch import Tensor, nn

from polo.control.policies.nets import mlp
from polo.core.registry import Settings


class ValueNetwork(nn.Module):
    """``V_φ(s)`` ``[B]``: an MLP whose last layer has gain 1."""

    def __init__(self, obs_dim: int, hidden: list[int], activation: str):
        super().__init__()
        self.net = mlp(obs_dim, hidden, 1, activation, out_gain=1.0)

    def forward(self, obs: Tensor) -> Tensor:
        return self.net(obs).squeeze(-1)


class ZeroValue(nn.Module):
    """No critic: ``V ≡ 0`` ``[B]``, no parameters (advantages from the rewards alone, e.g. standardised bandit
    rewards)."""

    def forward(self, obs: Tensor) -> Tensor:
        return obs.new_zeros(obs.shape[0])


class CriticSettings(Settings):
    hidden: list[int] = Field(default_factory=lambda: [64, 64])
    activation: str = "tanh"
    enabled: bool = True
    """False: no critic (V ≡ 0 and no value loss)."""

    def build(self, obs_dim: int) -> ValueNetwork | ZeroValue:
        return ValueNetwork(obs_dim, self.hidden, self.activation) if self.enabled else ZeroValue()
