"""Diagonal Gaussian policy with a state-independent log-std (the continuous-action PPO of CleanRL), and its
generalized State-Dependent Exploration variant (``sde: true``; "Smooth Exploration for Robotic Reinforcement
Learning", Raffin, Kober and Stulp, arXiv:2005.05719, as stable-baselines3's StateDependentNoiseDistribution does it).

gSDE in our words. Let φ(s) ∈ R^L be the actor's last hidden layer (the input of the layer that outputs the mean
μ(s) = Aφ(s) + b). Instead of adding fresh noise to every action, the policy keeps one random matrix W ∈ R^{L×d}
per environment copy and acts ``a = μ(s) + φ(s)ᵀW``, with the entries W_lj ~ N(0, σ_lj²) independent and
σ = exp(ℓ) a learned ``[L, d]`` parameter (``full_std``; otherwise one σ_l per feature, shared by the d action
dimensions). W is held for ``sde_sample_freq`` steps and then drawn again, so within that window the exploration
is a deterministic, smooth function of the state (the same state gives the same perturbation) instead of white
noise. For one W draw and a fixed s, φ(s)ᵀW is a sum of independent centred Gaussians, so the action is distributed
as ``N(μ(s), diag(v(s)))`` with ``v_j(s) = Σ_l φ_l(s)² σ_lj²``; PPO stores and rescores that marginal log-density
(standard deviation ``sqrt(v + ε)``, ε = 1e-6 as in stable-baselines3) and its entropy. With ``learn_features:
false`` (the paper's default, and the only choice stable-baselines3's PPO offers) φ is detached inside v, so the
variance trains σ only and the features are shaped by the mean alone.
"""
from __future__ import annotations

from typing import Any

import torch
from pydantic import Field
from torch import Tensor, nn

from polo.control.math.distributions import diag_gaussian_entropy, diag_gaussian_logp
from polo.control.policies.base import CONTROL_POLICIES, ActionScore, ControlPolicy, ControlPolicySettings
from polo.control.policies.nets import mlp
from polo.control.policies.spaces import flat_dim

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


class StateDependentGaussianPolicy(ControlPolicy):
    """gSDE (module docstring): ``a = μ(s) + φ(s)ᵀW_i`` for row i of the act batch, scored as
    ``N(μ(s), diag(φ(s)²ᵀσ² + ε))``.

    State: ``_eps`` ``[N, L, d]`` standard normal draws and ``_calls`` (stochastic ``act`` calls since the first
    draw); ``W_i = σ ⊙ _eps[i]`` with the current σ, so a matrix held across an update still follows the current
    distribution (stable-baselines3 redraws W at every rollout's start, which this equals when the rollout length is
    a multiple of ``sde_sample_freq``). A stochastic call draws fresh ``_eps`` from its ``generator`` when
    ``_calls % sde_sample_freq == 0``; the first stochastic call fixes N. A stochastic call with another batch size
    draws one-off matrices and leaves the state alone; a deterministic call returns μ and touches nothing."""

    EPSILON = 1e-6

    def __init__(self, obs_dim: int, act_dim: int, hidden: list[int], activation: str, log_std_init: float,
                 sample_freq: int, full_std: bool, learn_features: bool):
        super().__init__()
        self.mean = mlp(obs_dim, hidden, act_dim, activation, out_gain=0.01)
        self.latent_dim = hidden[-1] if hidden else obs_dim
        self.act_dim = act_dim
        self.log_std = nn.Parameter(torch.full((self.latent_dim, act_dim if full_std else 1), float(log_std_init)))
        self.sample_freq, self.learn_features = sample_freq, learn_features
        self._eps: Tensor | None = None
        self._calls = 0

    def features_and_mean(self, obs: Tensor) -> tuple[Tensor, Tensor]:
        """φ(s) ``[B, L]`` (the last hidden layer; the observation without hidden layers) and μ(s) ``[B, d]``."""
        phi = self.mean[:-1](obs)
        return phi, self.mean[-1](phi)

    def sigma(self) -> Tensor:
        """σ ``[L, d]``: the standard deviations of W's entries."""
        return self.log_std.exp().expand(self.latent_dim, self.act_dim)

    def action_log_std(self, phi: Tensor) -> Tensor:
        """``log sqrt(Σ_l φ_l² σ_lj² + ε)`` ``[B, d]``, φ detached unless ``learn_features``."""
        phi = phi if self.learn_features else phi.detach()
        return 0.5 * torch.log(phi.pow(2) @ self.sigma().pow(2) + self.EPSILON)

    def _draw(self, n: int, like: Tensor, generator: torch.Generator | None) -> Tensor:
        return torch.randn((n, self.latent_dim, self.act_dim), generator=generator, dtype=like.dtype,
                           device=like.device)

    def act(self, obs: Tensor, generator: torch.Generator | None = None, deterministic: bool = False
            ) -> dict[str, Tensor]:
        phi, mean = self.features_and_mean(obs)
        log_std = self.action_log_std(phi)
        if deterministic:
            action = mean
        else:
            n = obs.shape[0]
            if self._eps is None or (self._eps.shape[0] == n and self._calls % self.sample_freq == 0):
                self._eps, self._calls = self._draw(n, mean, generator), 0
            if self._eps.shape[0] == n:
                eps = self._eps
                self._calls += 1
            else:  # another batch (a probe, a differently sized rollout): one-off matrices, state untouched
                eps = self._draw(n, mean, generator)
            feats = phi if self.learn_features else phi.detach()
            action = mean + torch.einsum("bl,bld->bd", feats, eps * self.sigma())
        return {"action": action, "logp": diag_gaussian_logp(action, mean, log_std)}

    def evaluate(self, obs: Tensor, record: dict[str, Tensor]) -> ActionScore:
        phi, mean = self.features_and_mean(obs)
        log_std = self.action_log_std(phi)
        return ActionScore(diag_gaussian_logp(record["action"], mean, log_std), diag_gaussian_entropy(log_std),
                           metrics={"policy/std": float(log_std.detach().exp().mean()),
                                    "policy/sde_sigma": float(self.sigma().detach().mean())})

    def extra_state(self) -> dict[str, Any]:
        return {"sde_eps": None if self._eps is None else self._eps.clone(), "sde_calls": self._calls}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        eps = state["sde_eps"]
        self._eps = None if eps is None else eps.clone()
        self._calls = int(state["sde_calls"])


@CONTROL_POLICIES.register("gaussian")
class GaussianPolicySettings(ControlPolicySettings):
    """Diagonal Gaussian over a Box action space; the environment receives the unclipped sample (clip it with
    the environment's ``clip_action``), so the stored log-probability stays exact."""

    paper = "Proximal Policy Optimization Algorithms (arXiv:1707.06347)"
    provenance = "CODE"

    hidden: list[int] = Field(default_factory=lambda: [64, 64])
    activation: str = "tanh"
    log_std_init: float = 0.0
    """Initial log σ: of the action noise, or with ``sde`` of the exploration matrices' entries (stable-baselines3's
    default 0 in both cases)."""
    sde: bool = False
    """generalized State-Dependent Exploration (module docstring; "Smooth Exploration for Robotic Reinforcement
    Learning", arXiv:2005.05719): ``a = μ(s) + φ(s)ᵀW`` with a random matrix W per environment copy, held for
    ``sde_sample_freq`` steps. The action's distribution is still a diagonal Gaussian, with a state-dependent
    variance."""
    sde_sample_freq: int = Field(4, ge=1)
    """k: draw new exploration matrices every k stochastic ``act`` calls (rl-zoo's Pendulum setting is 4)."""
    full_std: bool = True
    """gSDE: one σ per (feature, action dimension) pair, ``[L, d]``; false: one per feature, ``[L, 1]``."""
    learn_features: bool = False
    """gSDE: let the variance's gradient reach the features φ (false: φ is detached there, as in the paper)."""

    def build(self, observation_space: Any, action_space: Any) -> ControlPolicy:
        if getattr(action_space, "shape", None) is None or len(action_space.shape) != 1 \
                or not hasattr(action_space, "low"):
            raise ValueError(f"policy gaussian needs a one-dimensional Box action space, got {action_space}")
        if self.sde:
            return StateDependentGaussianPolicy(flat_dim(observation_space), action_space.shape[0], self.hidden,
                                                self.activation, self.log_std_init, self.sde_sample_freq,
                                                self.full_std, self.learn_features)
        return DiagGaussianPolicy(flat_dim(observation_space), action_space.shape[0], self.hidden, self.activation,
                                  self.log_std_init)
