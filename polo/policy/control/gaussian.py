"""Diagonal Gaussian policy with a state-independent log-std (the continuous-action PPO of CleanRL)."""
from __future__ import annotations

from typing import Any

import torch
from pydantic import Field
from torch import Tensor, nn

from polo.core.control.distributions import diag_gaussian_entropy, diag_gaussian_logp
from polo.policy.control.base import CONTROL_POLICIES, ActionScore, ControlPolicy, ControlPolicySettings
from polo.policy.control.nets import mlp
from polo.policy.control.spaces import flat_dim

class DiagGaussianPolicy(ControlPolicy):
    """``π(a|s) = N(μ_θ(s), diag exp(2ℓ))``: μ from an MLP (last layer gain 0.01), ℓ a free parameter."""

    def __init__(self, obs_dim: int, act_dim: int, hidden: list[int], activation: str, log_std_init: float):
        super().__init__()
        self.mean = mlp(obs_dim, hidden, act_dim, activation, out_gain=0.01)
        self.log_std = nn.Parameter(torch.full((1, act_dim), float(log_std_init)))

    def act(self, obs: Tensor, generator: torch.Generator | None = None, deterministic: bool = False
            ) -> dict[str, Tensor]:
        mean = self.mean(obs)
        log_std = self.log_std.expand_as(mean)
        if deterministic:
            action = mean
        else:
            noise = torch.randn(mean.shape, generator=generator, dtype=mean.dtype, device=mean.device)
            action = mean + noise * log_std.exp()
        return {"action": action, "logp": diag_gaussian_logp(action, mean, log_std)}

    def evaluate(self, obs: Tensor, record: dict[str, Tensor]) -> ActionScore:
        mean = self.mean(obs)
        log_std = self.log_std.expand_as(mean)
        return ActionScore(diag_gaussian_logp(record["action"], mean, log_std), diag_gaussian_entropy(log_std),
                           metrics={"policy/std": float(log_std.detach().exp().mean())})


@CONTROL_POLICIES.register("gaussian")
class GaussianPolicySettings(ControlPolicySettings):
    """Diagonal Gaussian over a Box action space; the environment receives the unclipped sample (clip it with
    the environment's ``clip_action``), so the stored log-probability stays exact."""

    paper = "Proximal Policy Optimization Algorithms (arXiv:1707.06347)"
    provenance = "CODE"

    hidden: list[int] = Field(default_factory=lambda: [64, 64])
    activation: str = "tanh"
    log_std_init: float = 0.0

    def build(self, observation_space: Any, action_space: Any) -> ControlPolicy:
        if getattr(action_space, "shape", None) is None or len(action_space.shape) != 1 \
                or not hasattr(action_space, "low"):
            raise ValueError(f"policy gaussian needs a one-dimensional Box action space, got {action_space}")
        return DiagGaussianPolicy(flat_dim(observation_space), action_space.shape[0], self.hidden, self.activation,
                                  self.log_std_init)
