"""MPPI (model-predictive path integral control) with a Fisher-information exploration bonus, the acting policy of
QOED's system-identification loop ("Quasi-Optimal Experimental Design for Active System Identification",
arXiv:2605.12084; MPPI: "Information Theoretic MPC for Model-Based Reinforcement Learning", Williams et al. 2017).

Each call perturbs the warm-started control sequence ``U [H, d_u]`` with Gaussian noise into ``K`` candidates
(clamped to the bounds), rolls every candidate out under the believed parameters ``θ`` and — when an
information score is asked for — under the ``2p`` finite-difference perturbations of ``θ`` as well, so that each
candidate gets its trajectory FIM ``F_k = Σ_t J_tᵀ J_t / σ²`` (``J_t = ∂g(s_t)/∂θ`` along the planned path).
The candidate's cost is ``c'_k = (c_k − w_F·info(F_k))·dt`` with the goal-reaching stage cost
``c_k = Σ_t goal_weight·‖pos_t − goal‖² + action_weight·‖u_t‖² + noise_weight·‖ε_t‖²`` (``pos`` = the first two
state dims); ``U ← clamp(Σ_k softmax(−(c' − min c')/λ)_k U_k)``; the first control is applied and ``U`` is shifted
by one environment step.
"""
from __future__ import annotations

from typing import Callable

import torch
from pydantic import Field
from torch import Tensor

from polo.control.math.qoed import central_jacobian, fisher_information, mppi_update, perturbed_thetas
from polo.core.registry import ConfigError, Settings


class MPPISettings(Settings):
    """The sampling planner's knobs."""

    samples: int = Field(256, ge=1)
    """Candidate control sequences per plan (K)."""
    horizon: int = Field(10, ge=1)
    """Planning steps (H)."""
    plan_dt: float = Field(0.1, gt=0)
    """Time step of the planning model; the environment's dt must be a whole multiple of it."""
    iterations: int = Field(1, ge=1)
    """Refinements of U per environment step."""
    temperature: float = Field(1e-3, gt=0)
    """λ of the softmax weights (of the dt-scaled costs)."""
    noise_var: list[float] = Field(default_factory=lambda: [0.4, 0.4])
    """Variance of the control perturbations, one per control dim."""
    goal_weight: float = Field(2.5, ge=0)
    action_weight: float = Field(0.5, ge=0)
    noise_weight: float = Field(0.1, ge=0)
    fisher_weight: float = Field(1.0, ge=0)
    """w_F: weight of the information score against the cost."""


class MPPIPlanner:
    """Plans with ``step(state, action, theta)`` and ``observe(state)`` (both broadcasting over leading dims);
    ``difference`` subtracts observations (wrapping angles); ``noise_std`` is the measurement noise σ of the FIM."""

    def __init__(self, settings: MPPISettings, step: Callable[..., Tensor], observe: Callable[[Tensor], Tensor],
                 difference: Callable[[Tensor, Tensor], Tensor], low: Tensor, high: Tensor, goal: Tensor,
                 noise_std: float, env_dt: float, dtype: torch.dtype = torch.float64):
        if len(settings.noise_var) != low.shape[0]:
            raise ConfigError(f"planner.noise_var needs {low.shape[0]} entries (one per control dim), "
                              f"got {settings.noise_var}")
        shift = env_dt / settings.plan_dt
        if abs(shift - round(shift)) > 1e-9 or round(shift) < 1:
            raise ConfigError(f"planner.plan_dt={settings.plan_dt} must divide the environment's dt={env_dt}")
        self.settings, self.step, self.observe, self.difference = settings, step, observe, difference
        self.low, self.high, self.goal = low.to(dtype), high.to(dtype), goal.to(dtype)
        self.noise_std, self.shift, self.dtype = noise_std, int(round(shift)), dtype
        self.noise_scale = torch.tensor(settings.noise_var, dtype=dtype).sqrt()
        self.U = torch.zeros(settings.horizon, low.shape[0], dtype=dtype)

    def rollout(self, state: Tensor, controls: Tensor, thetas: Tensor) -> Tensor:
        """States ``[M, K, H, d_s]`` of ``K`` control sequences ``[K, H, d_u]`` under ``M`` parameter vectors
        ``[M, p]`` from one start ``state [d_s]``."""
        m, (k, h, _) = thetas.shape[0], controls.shape
        s = state.expand(m, k, state.shape[-1])
        out = []
        for t in range(h):
            s = self.step(s, controls[None, :, t], thetas[:, None], self.settings.plan_dt)
            out.append(s)
        return torch.stack(out, 2)

    @torch.no_grad()
    def plan(self, state: Tensor, theta: Tensor, generator: torch.Generator,
             score: Callable[[Tensor], Tensor] | None = None, fd_steps: Tensor | None = None
             ) -> tuple[Tensor, dict[str, float]]:
        """The control to apply ``[d_u]`` and diagnostics. ``score`` maps candidate FIMs ``[K, p, p]`` to their
        information ``[K]`` (None: plan on the cost alone), ``fd_steps`` ``[p]`` the finite-difference steps."""
        cfg = self.settings
        state, theta = state.to(self.dtype), theta.to(self.dtype)
        informed = score is not None and cfg.fisher_weight > 0
        thetas = torch.cat([theta[None], perturbed_thetas(theta, fd_steps)]) if informed else theta[None]
        for _ in range(cfg.iterations):
            noise = torch.randn(cfg.samples, *self.U.shape, generator=generator, dtype=self.dtype) * self.noise_scale
            controls = torch.clamp(self.U + noise, self.low, self.high)
            states = self.rollout(state, controls, thetas)
            pos_err = states[0, ..., :2] - self.goal
            cost = (cfg.goal_weight * pos_err.square().sum(-1) + cfg.action_weight * controls.square().sum(-1)
                    + cfg.noise_weight * noise.square().sum(-1)).sum(-1)
            info = torch.zeros_like(cost)
            if informed:
                jac = central_jacobian(self.observe(states[1:]), fd_steps, self.difference)  # [K, H, d_y, p]
                info = torch.nan_to_num(score(fisher_information(jac, self.noise_std).sum(1)), nan=0.0)
            total = (cost - cfg.fisher_weight * info) * cfg.plan_dt
            self.U = mppi_update(controls, total, cfg.temperature, self.low, self.high)
        best = int(torch.argmin(total))
        action = self.U[0].clone()
        self.U = torch.cat([self.U[self.shift:], torch.zeros_like(self.U[:self.shift])])
        return action, {"plan/cost_best": float(cost[best]), "plan/info_best": float(info[best]),
                        "plan/info_mean": float(info.mean())}

    def state_dict(self) -> dict[str, Tensor]:
        return {"U": self.U.clone()}

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        self.U = state["U"].clone()
