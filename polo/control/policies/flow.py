"""PolicyFlow's policy: a conditional flow from Gaussian noise to an action, plus exact Gaussian exploration noise
("PolicyFlow: Policy Optimization with Continuous Normalizing Flow in Reinforcement Learning (arXiv:2602.01156)").

Acting: ``x0 ~ N(0, I)`` (zeros with ``degenerate2gaussian``), ``a_prior`` = the explicit-midpoint solution of
``dx/dt = v_θ(x, t | s)`` over K steps, ``a = a_prior + δ``, ``δ ~ N(0, σ²)``; the record keeps x0, a_prior, δ,
σ_old and ``logp = log N(δ; 0, σ_old)``. Scoring (one update's minibatch): t drawn uniformly from the 2K+1 solver
times, ``x_t`` on the path from x0 to a_prior, ``Δv = v_θ(x_t, t) − v_θ⁻(x_t, t)`` against the frozen copy θ⁻ of the
parameters at the start of the update, ``logp_new = log N(δ; Δv, σ)`` (so ρ = 1 at the first minibatch), the exact
KL of the two δ-Gaussians, the δ-Gaussian entropy, and the Brownian regulariser ``c_BR · mean(penalty)`` as the
auxiliary loss (polo.control.math.flow).
"""
from __future__ import annotations

import copy
import math
from typing import Any, Literal

import torch
from pydantic import Field
from torch import Tensor, nn

from polo.control.math.distributions import diag_gaussian_entropy, diag_gaussian_logp
from polo.control.math.flow import (Interpolation, brownian_penalty, clamp_log_std, delta_gaussian_kl, interpolate,
                                    midpoint_integrate, ratio_times, solver_times)
from polo.control.policies.base import CONTROL_POLICIES, ActionScore, ControlPolicy, ControlPolicySettings
from polo.control.policies.nets import mlp, orthogonal_linear
from polo.control.policies.spaces import flat_dim
from polo.core.registry import ConfigError


class PositionalTimeEmbedding(nn.Module):
    """``[cos(t·f_k), sin(t·f_k)]``, ``f_k = 10000^(−k/(e/2))``, k < e/2 (the sinusoidal embedding of "Attention Is
    All You Need (arXiv:1706.03762)", as CleanDiffuser applies it to a continuous time)."""

    def __init__(self, dim: int):
        super().__init__()
        half = dim // 2
        self.register_buffer("freqs", (1.0 / 10000) ** (torch.arange(half, dtype=torch.float32) / half))

    def forward(self, t: Tensor) -> Tensor:
        x = t[:, None] * self.freqs
        return torch.cat([x.cos(), x.sin()], -1)


class FourierTimeEmbedding(nn.Module):
    """Random Fourier features ``[cos 2πWt, sin 2πWt]`` with fixed ``W ~ N(0, 16²)`` (e/8 of them), then
    ``Linear(e/4 → e) → Mish → Linear(e → e)`` (CleanDiffuser's FourierEmbedding; "Score-Based Generative Modeling
    through Stochastic Differential Equations (arXiv:2011.13456)")."""

    def __init__(self, dim: int, scale: float = 16.0):
        super().__init__()
        self.register_buffer("freqs", torch.randn(dim // 8) * scale)
        self.mlp = nn.Sequential(nn.Linear(2 * (dim // 8), dim), nn.Mish(), nn.Linear(dim, dim))

    def forward(self, t: Tensor) -> Tensor:
        x = t[:, None] * (2 * math.pi * self.freqs)
        return self.mlp(torch.cat([x.cos(), x.sin()], -1))


class VelocityField(nn.Module):
    """``v(x, t | s) = MLP([x, e(t) + c])`` with the condition embedding ``c = E(s)`` (a Linear map or an MLP)."""

    def __init__(self, obs_dim: int, act_dim: int, hidden: list[int], activation: str, embed_dim: int,
                 condition: str, time_embedding: str):
        super().__init__()
        self.condition = (orthogonal_linear(obs_dim, embed_dim, 1.0) if condition == "linear"
                          else mlp(obs_dim, hidden, embed_dim, activation))
        self.time = FourierTimeEmbedding(embed_dim) if time_embedding == "fourier" else PositionalTimeEmbedding(embed_dim)
        self.net = mlp(act_dim + embed_dim, hidden, act_dim, activation, out_gain=0.01)

    def forward(self, x: Tensor, t: Tensor, cond: Tensor) -> Tensor:
        return self.velocity(x, self.time(t) + cond)

    def velocity(self, x: Tensor, h: Tensor) -> Tensor:
        """v from x and ``h = e(t) + c``."""
        return self.net(torch.cat([x, h], -1))


def frozen_copy(module: nn.Module) -> nn.Module:
    """A copy of ``module`` whose parameters are buffers: it is saved in the state dict but is not among
    ``parameters()`` (no optimizer sees it) and takes no gradient."""
    clone = copy.deepcopy(module)
    for sub in clone.modules():
        for name, param in list(sub._parameters.items()):
            del sub._parameters[name]
            sub.register_buffer(name, param.detach().clone())
    return clone


class FlowPolicy(ControlPolicy):
    """The flow policy; ``last`` (θ⁻, buffers only) holds the velocity field of the previous update."""

    def __init__(self, obs_dim: int, act_dim: int, settings: "FlowPolicySettings"):
        super().__init__()
        s = settings
        self.field = VelocityField(obs_dim, act_dim, s.hidden, s.activation, s.embed_dim, s.condition,
                                   s.time_embedding)
        self.last = frozen_copy(self.field)
        self.log_std = nn.Parameter(torch.full((act_dim,), float(s.log_std_init)))
        self.interpolation: Interpolation = s.interpolation
        self.degenerate = s.degenerate2gaussian
        self.brownian_coef, self.brownian_beta = s.brownian_coef, s.brownian_beta
        self.solver_grid = solver_times(s.steps, s.interpolation)
        self.ratio_grid = ratio_times(s.steps, s.interpolation)
        # t (and the stochastic interpolant's ε) of `evaluate`; seeded from torch's global generator (the run's seed)
        self._generator = torch.Generator().manual_seed(int(torch.randint(0, 2**62, (1,))))

    def act(self, obs: Tensor, generator: torch.Generator | None = None, deterministic: bool = False
            ) -> dict[str, Tensor]:
        n, d = obs.shape[0], self.log_std.shape[0]
        x0 = obs.new_zeros(n, d) if self.degenerate else torch.randn(n, d, generator=generator, dtype=obs.dtype)
        # the solver queries the velocity at the 2K+1 grid points and midpoints only: embed those times once
        h = self.field.time(self.ratio_grid)[:, None] + self.field.condition(obs)  # [2K+1, n, e]
        per_time = (self.ratio_grid.shape[0] - 1) / float(self.ratio_grid[-1])
        a_prior = midpoint_integrate(lambda x, t: self.field.velocity(x, h[round(float(t[0]) * per_time)]), x0,
                                     self.solver_grid).detach()
        log_std = clamp_log_std(self.log_std).detach().expand(n, d)
        sigma = log_std.exp()
        delta = torch.zeros_like(a_prior) if deterministic else sigma * torch.randn(n, d, generator=generator,
                                                                                     dtype=obs.dtype)
        return {"action": a_prior + delta, "logp": diag_gaussian_logp(delta, torch.zeros_like(delta), log_std),
                "x0": x0, "a_prior": a_prior, "delta": delta, "sigma_old": sigma}

    def evaluate(self, obs: Tensor, record: dict[str, Tensor]) -> ActionScore:
        x0, x1, delta = record["x0"], record["a_prior"], record["delta"]
        m = obs.shape[0]
        t = self.ratio_grid[torch.randint(0, self.ratio_grid.shape[0], (m,), generator=self._generator)]
        noise = (torch.randn(x1.shape, generator=self._generator, dtype=x1.dtype)
                 if self.interpolation == "stochastic_interpolant" else None)
        xt = interpolate(self.interpolation, x0, x1, t, noise)
        v_new = self.field(xt, t, self.field.condition(obs))
        with torch.no_grad():
            v_old = self.last(xt, t, self.last.condition(obs))
        shift = v_new - v_old
        log_std = clamp_log_std(self.log_std).expand_as(delta)
        sigma = log_std.exp()
        aux, metrics = None, {"policy/std": float(sigma.detach().mean()),
                              "policy/delta_v": float(shift.detach().abs().mean())}
        if not self.degenerate and self.brownian_coef > 0:
            penalty = brownian_penalty(self.interpolation, v_new, v_old, xt, t, self.brownian_beta).mean()
            aux = self.brownian_coef * penalty
            metrics["policy/brownian"] = float(penalty.detach())
        return ActionScore(diag_gaussian_logp(delta, shift, log_std), diag_gaussian_entropy(log_std),
                           aux_loss=aux, kl=delta_gaussian_kl(record["sigma_old"], sigma, shift).detach(),
                           metrics=metrics)

    def end_update(self) -> None:
        """θ⁻ ← θ."""
        self.last.load_state_dict(self.field.state_dict())

    def extra_state(self) -> dict[str, Any]:
        return {"generator": self._generator.get_state()}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        self._generator.set_state(state["generator"])


@CONTROL_POLICIES.register("flow")
class FlowPolicySettings(ControlPolicySettings):
    """PolicyFlow's flow policy over a Box action space (``method: ppo`` trains it; its Brownian regulariser is
    the policy's auxiliary loss, its δ-Gaussian entropy the one ``ent_coef`` weighs, its exact KL the one
    ``lr_schedule: kl_adaptive`` reads)."""

    paper = "PolicyFlow: Policy Optimization with Continuous Normalizing Flow in Reinforcement Learning (arXiv:2602.01156)"
    provenance = "CODE"

    hidden: list[int] = Field(default_factory=lambda: [64, 64])
    """Hidden widths of the velocity MLP (and of the condition MLP with ``condition: mlp``); the code's default
    is [256, 256, 256], its MultiGoal demo [256, 128, 64]."""
    activation: str = "mish"
    embed_dim: int = Field(32, ge=2)
    """Width e of the time embedding e(t) and of the condition embedding c, which are added."""
    condition: Literal["linear", "mlp"] = "linear"
    """Observation → condition embedding: one Linear layer (the MultiGoal demo) or an MLP."""
    time_embedding: Literal["fourier", "positional"] = "fourier"
    steps: int = Field(10, ge=1)
    """K: explicit-midpoint steps of the ODE (2K velocity evaluations per action; 2K+1 ratio times)."""
    interpolation: Literal["rectified_flow", "trigflow", "stochastic_interpolant"] = "rectified_flow"
    """The path from x0 to a_prior on which Δv is evaluated (and the ODE's time span: π/2 for trigflow)."""
    degenerate2gaussian: bool = False
    """x0 = 0: a_prior is a deterministic function of the state, so the policy is a Gaussian N(a_prior, σ²) and
    the method Gaussian PPO (the Brownian term is skipped, as in the code)."""
    brownian_coef: float = Field(0.01, ge=0)
    """c_BR: weight of the Brownian regulariser (0: off)."""
    brownian_beta: float = Field(1.0, gt=0)
    """β: the regulariser's target field is v = β·x_t/(1 − t + β·t) on the rectified path (v = x_t at 1)."""
    log_std_init: float = 0.0
    """Initial log σ of the exploration noise δ (σ = 1); σ = exp(clamp(ℓ, −5, 2))."""

    def build(self, observation_space: Any, action_space: Any) -> ControlPolicy:
        if getattr(action_space, "shape", None) is None or len(action_space.shape) != 1 \
                or not hasattr(action_space, "low"):
            raise ConfigError(f"policy flow needs a one-dimensional Box action space, got {action_space}")
        if self.time_embedding == "fourier" and self.embed_dim < 8:
            raise ConfigError(f"policy.embed_dim={self.embed_dim}: the fourier time embedding needs at least 8")
        return FlowPolicy(flat_dim(observation_space), action_space.shape[0], self)
