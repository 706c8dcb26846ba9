"""Tensor math of PolicyFlow, PPO with a flow-matching policy ("PolicyFlow: Policy Optimization with Continuous
Normalizing Flow in Reinforcement Learning (arXiv:2602.01156)").

The policy carries noise ``x0 ~ N(0, I)`` to a prior action ``a_prior`` by integrating a velocity field ``v(x, t)``
over ``[0, t_end]`` and executes ``a = a_prior + δ`` with ``δ ~ N(0, σ²)``. An update scores a stored step by
the velocity change ``Δv = v_θ − v_θ⁻`` at one point ``x_t`` of the path from ``x0`` to ``a_prior``, read as a
shift of δ's mean: ``log π_new = log N(δ; Δv, σ_new)`` against ``log π_old = log N(δ; 0, σ_old)``
(``polo.control.math.distributions.diag_gaussian_logp``).

Interpolations (``t_end``): ``rectified_flow`` (1), ``trigflow`` (π/2), ``stochastic_interpolant`` (1).
"""
from __future__ import annotations

import math
from typing import Callable, Literal

import torch
from torch import Tensor

Interpolation = Literal["rectified_flow", "trigflow", "stochastic_interpolant"]
T_END: dict[str, float] = {"rectified_flow": 1.0, "trigflow": math.pi / 2, "stochastic_interpolant": 1.0}
"""End of the time interval each interpolation integrates over."""
LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0


def _check(kind: str) -> None:
    if kind not in T_END:
        raise ValueError(f"interpolation {kind!r}: expected one of {', '.join(T_END)}")


def solver_times(steps: int, kind: Interpolation = "rectified_flow") -> Tensor:
    """The ODE grid ``t_i = i·t_end/K``, i = 0..K (``[K+1]``)."""
    _check(kind)
    if steps < 1:
        raise ValueError(f"steps={steps}: the ODE needs at least one step")
    return torch.linspace(0.0, T_END[kind], steps + 1)


def ratio_times(steps: int, kind: Interpolation = "rectified_flow") -> Tensor:
    """The set 𝒯 an update draws ``t`` from: every grid point and every midpoint of the K-step grid, i.e.
    ``j·t_end/(2K)``, j = 0..2K (``[2K+1]``), the times at which the ODE solver queried the velocity field."""
    _check(kind)
    if steps < 1:
        raise ValueError(f"steps={steps}: the ODE needs at least one step")
    return torch.linspace(0.0, T_END[kind], 2 * steps + 1)


def midpoint_integrate(velocity: Callable[[Tensor, Tensor], Tensor], x0: Tensor, times: Tensor) -> Tensor:
    """Explicit midpoint rule along ``times`` ``[K+1]``: with ``Δ = t_{i+1} − t_i``,
    ``x ← x + Δ·v(x + ½Δ·v(x, t_i), t_i + ½Δ)``. ``velocity(x [B, d], t [B]) → [B, d]``; returns x at ``times[-1]``."""
    x = x0
    ones = x0.new_ones(x0.shape[:-1])
    for i in range(times.shape[0] - 1):
        t, dt = times[i], times[i + 1] - times[i]
        mid = x + 0.5 * dt * velocity(x, t * ones)
        x = x + dt * velocity(mid, (t + 0.5 * dt) * ones)
    return x


def interpolate(kind: Interpolation, x0: Tensor, x1: Tensor, t: Tensor, noise: Tensor | None = None) -> Tensor:
    """The point ``x_t`` of the path from noise ``x0`` to ``x1`` (``[B, d]``, ``t`` ``[B]``):
    rectified_flow ``(1−t)·x0 + t·x1``; trigflow ``cos t·x0 + sin t·x1``; stochastic_interpolant
    ``(1−t)·x0 + t·x1 + sqrt(2t·max(1−t, 1e-6))·ε`` with ``ε = noise`` ~ N(0, I)."""
    _check(kind)
    t = t.unsqueeze(-1)
    if kind == "trigflow":
        return torch.cos(t) * x0 + torch.sin(t) * x1
    xt = (1 - t) * x0 + t * x1
    if kind == "stochastic_interpolant":
        if noise is None:
            raise ValueError("the stochastic_interpolant path needs noise ε of x0's shape")
        xt = xt + torch.sqrt(2 * t * (1 - t).clamp_min(1e-6)) * noise
    return xt


def brownian_penalty(kind: Interpolation, v_new: Tensor, v_old: Tensor, xt: Tensor, t: Tensor,
                     beta: float = 1.0) -> Tensor:
    """Elementwise squared residual ``[B, d]`` of the Brownian regulariser, which pulls the velocity field toward
    one whose flow spreads samples isotropically (an entropy bonus that needs no density); ``v_old`` the frozen
    field (no gradient):
    rectified_flow ``((1−t)·v_new − β(x_t − t·v_old))²``, trigflow ``(cos t·v_new − β(cos t·x_t − sin t·v_old))²``,
    stochastic_interpolant ``((2(t−½)² + ½)·v_new − β(x_t − t·v_old))²``.
    With ``v_old = v_new`` the rectified fixed point is ``v = β·x_t / (1 − t + β·t)`` (``v = x_t`` at β = 1:
    ``dx/dt = x`` carries N(0, I) to N(0, e²I))."""
    _check(kind)
    t = t.unsqueeze(-1)
    if kind == "trigflow":
        return (torch.cos(t) * v_new - beta * (torch.cos(t) * xt - torch.sin(t) * v_old)) ** 2
    scale = (1 - t) if kind == "rectified_flow" else 2 * (t - 0.5) ** 2 + 0.5
    return (scale * v_new - beta * (xt - t * v_old)) ** 2


def delta_gaussian_kl(sigma_old: Tensor, sigma_new: Tensor, shift: Tensor) -> Tensor:
    """``KL(N(0, σ_old²) ‖ N(Δv, σ_new²))`` summed over the last dim, with PolicyFlow's 1e-5 inside the log:
    ``Σ_j [log(σ_new/σ_old + 1e-5) + (σ_old² + Δv²)/(2σ_new²) − ½]``."""
    return (torch.log(sigma_new / sigma_old + 1e-5) + (sigma_old ** 2 + shift ** 2) / (2 * sigma_new ** 2) - 0.5).sum(-1)


def clamp_log_std(log_std: Tensor, low: float = LOG_STD_MIN, high: float = LOG_STD_MAX) -> Tensor:
    """The learnable log-std clamped to ``[low, high]`` (σ = exp of it: ``[e⁻⁵, e²]`` by default)."""
    return log_std.clamp(low, high)
