"""``method: qoed``: active system identification of UnicycleID — MPPI toward a goal with a Fisher-information
bonus (BOED: ``tr F``; QOED: the Schur complement on the identifiable set; agnostic: its masked diagonal; none),
and a Gaussian belief over the dynamics parameters refined by CEM. From "Quasi-Optimal Experimental Design for
Active System Identification" (arXiv:2605.12084).

Each environment step: (1) the history FIM ``F_hist = Σ J_tᵀJ_t/σ²`` of the last ``max_history`` transitions at
the posterior mean ``m`` (one-step finite-difference Jacobians from the recorded true states) picks the
identifiable set ``S`` (all parameters before any data); (2) MPPI plans from the true state under ``m``, scoring
each candidate's trajectory FIM with the objective; (3) the first control is applied and ``(s_t, u_t, y_{t+1})``
recorded. (4) Once the history holds more than ``max_history`` transitions, CEM minimises
``Σ_t ‖y_t − g(f(s_t, u_t; θ))‖²/σ² + (θ − m)ᵀΣ⁻¹(θ − m)`` over the active parameters (``Σ_ii ≥ var_threshold``;
2048 samples, 1/8 elites, 5 iterations, search std 3× the belief std clipped to [1e-3, 25]); the posterior becomes
``m ← θ_CEM``, ``Σ ← (Σ⁻¹ + diag F_hist(m))⁻¹``, and the oldest transition is dropped.
"""
from __future__ import annotations

from typing import Any, Callable, Literal

import numpy as np
import torch
from pydantic import Field, model_validator

from polo.control.envs.registration import gymnasium, register_builtin_environments
from polo.control.envs.unicycle_id import (THETA_PRIOR_MEAN, THETA_PRIOR_STD, WHEEL_GAINS, identifiable_parameters,
                                           mass_ratios, observation_difference, unicycle_observe, unicycle_step)
from polo.control.math.qoed import (active_parameters, cem_minimize, central_jacobian, fd_steps,
                                    fisher_information, gaussian_posterior_cov, identifiable_mask, information,
                                    perturbed_thetas)
from polo.control.methods.base import CONTROL_METHODS, ControlMethod
from polo.control.policies.mppi import MPPIPlanner, MPPISettings

DTYPE = torch.float64
"""The Schur complement of near-collinear parameters is ill-conditioned: the belief and every FIM are float64."""


@CONTROL_METHODS.register("qoed")
class QOED(ControlMethod):
    """MPPI + information bonus + CEM posterior on ``polo/UnicycleID-v0`` (see the module docstring)."""

    paper = "Quasi-Optimal Experimental Design for Active System Identification (arXiv:2605.12084)"
    provenance = "CODE"
    headline = "eval/rmse"
    panels = (("eval/rmse", "RMSE of the identifiable parameters"), ("train/goal_distance", "distance to goal"),
              ("mask/size", "|S| (identifiable set)"), ("mask/wheel_gains", "wheel gains in S"),
              ("plan/info_best", "information of the best plan"), ("post/log_var_mean", "mean log variance"))

    objective: Literal["boed", "qoed", "agnostic", "none"] = "qoed"
    """The exploration score: boed tr F; qoed the Schur complement on S; agnostic Σ_{i∈S} F_ii; none: 0."""
    env_id: str = "polo/UnicycleID-v0"
    goal: list[float] = Field(default_factory=lambda: [5.0, 5.0])
    steps: int = Field(200, ge=1)
    """Environment steps of the run (the episode length)."""
    steps_per_iteration: int = Field(1, ge=1)
    """Environment steps per training iteration (``iterations`` = steps / steps_per_iteration)."""
    dt: float = Field(0.1, gt=0)
    """The environment's time step."""
    obs_noise_std: float = Field(0.05, gt=0)
    """Measurement noise σ of the environment and of the estimator's R = σ² I."""
    planner: MPPISettings = Field(default_factory=MPPISettings)
    fd_epsilon: float = Field(0.01, gt=0)
    """Finite-difference step ε_i = fd_epsilon·(|θ_i| + fd_floor)."""
    fd_floor: float = Field(1.0, gt=0)
    max_history: int = Field(20, ge=1)
    """Transitions in the history FIM; the posterior is refined whenever the history exceeds it."""
    eig_ratio: float = Field(0.01, gt=0, le=1)
    """Observable eigen-directions: λ_k ≥ eig_ratio·λ_1."""
    dist_threshold: float = Field(0.05, ge=0, le=1)
    """Greedy filter: drop j when 1 − |w_j·w_i| < dist_threshold (near-collinear with a chosen i)."""
    contrib_ratio: float = Field(1e-3, ge=0)
    """Candidates weigh ≥ contrib_ratio·max weight in the observable subspace."""
    var_threshold: float = Field(0.0025, ge=0)
    """Parameters with posterior variance below it are settled (inactive, frozen)."""
    eig_floor: float = Field(0.1, ge=0)
    """Nothing is identifiable while the largest history-FIM eigenvalue is at most this."""
    ridge: float = Field(1e-3, gt=0)
    """Ridge on F_NN in the Schur complement."""
    cem_samples: int = Field(2048, ge=2)
    cem_elite_frac: float = Field(0.125, gt=0, le=1)
    cem_iterations: int = Field(5, ge=1)
    cem_std_scale: float = Field(3.0, gt=0)
    """Initial CEM search std = cem_std_scale × belief std, clipped to [cem_std_min, cem_std_max]."""
    cem_std_min: float = Field(1e-3, gt=0)
    cem_std_max: float = Field(25.0, gt=0)
    param_low: float = 1e-6
    """CEM samples are clamped to [param_low, param_high]."""
    param_high: float = 100.0
    eval_every: int = Field(10, ge=1)
    checkpoint_every: int = Field(50, ge=1)

    @model_validator(mode="after")
    def _iterations_from_steps(self):
        if self.steps % self.steps_per_iteration:
            raise ValueError(f"steps={self.steps} is not a multiple of steps_per_iteration={self.steps_per_iteration}")
        object.__setattr__(self, "iterations", self.steps // self.steps_per_iteration)
        return self

    def derived_fields(self) -> set[str]:
        return {"iterations"}

    # ------------------------------------------------------------------ setup
    def setup(self, seed: int, log: Callable[[str], Any]) -> None:
        gym = gymnasium()
        register_builtin_environments()
        self._env = gym.make(self.env_id, goal=tuple(self.goal), max_steps=self.steps, dt=self.dt,
                             noise_std=self.obs_noise_std)
        _, info = self._env.reset(seed=seed)
        self._state = torch.as_tensor(info["state"], dtype=DTYPE)
        self._mean = torch.tensor(THETA_PRIOR_MEAN, dtype=DTYPE)
        self._cov = torch.diag(torch.tensor(THETA_PRIOR_STD, dtype=DTYPE).square())
        space = self._env.action_space
        self._planner = MPPIPlanner(self.planner, unicycle_step, unicycle_observe, observation_difference,
                                    torch.as_tensor(space.low), torch.as_tensor(space.high),
                                    torch.tensor(self.goal), self.obs_noise_std, self.dt, DTYPE)
        self._plan_gen = torch.Generator().manual_seed(seed)
        self._cem_gen = torch.Generator().manual_seed(seed + 1_000_003)
        p = self._mean.shape[0]
        self._history = {"s": torch.zeros(0, 5, dtype=DTYPE), "u": torch.zeros(0, space.shape[0], dtype=DTYPE),
                         "y": torch.zeros(0, 6, dtype=DTYPE)}
        self._mask = torch.ones(p, dtype=torch.bool)
        self._max_wheel_gains = 0
        self._env_steps = 0

    # ------------------------------------------------------------------ the model's Fisher information
    def history_fisher(self, theta: torch.Tensor, rows: slice = slice(None)) -> torch.Tensor:
        """``Σ_t J_tᵀJ_t/σ²`` over recorded transitions, ``J_t = ∂g(f(s_t, u_t; θ))/∂θ`` by central differences."""
        s, u = self._history["s"][rows], self._history["u"][rows]
        steps = fd_steps(theta, self.fd_epsilon, self.fd_floor)
        y = unicycle_observe(unicycle_step(s[None], u[None], perturbed_thetas(theta, steps)[:, None], self.dt))
        return fisher_information(central_jacobian(y, steps, observation_difference), self.obs_noise_std).sum(0)

    def select(self) -> torch.Tensor:
        """The identifiable set S from the last ``max_history`` transitions (all parameters before any data)."""
        if self._history["s"].shape[0] == 0:
            return torch.ones_like(self._mask)
        fim = self.history_fisher(self._mean, slice(-self.max_history, None))
        return identifiable_mask(fim, self._cov, self.eig_ratio, self.dist_threshold, self.contrib_ratio,
                                 self.var_threshold, self.eig_floor)

    def update_posterior(self) -> None:
        """CEM on the whole history (observation residual + prior Mahalanobis), then the covariance update."""
        s, u, y = self._history["s"], self._history["u"], self._history["y"]
        prior_mean, cov = self._mean, self._cov
        precision = torch.linalg.pinv(cov, hermitian=True)
        active = active_parameters(cov, self.var_threshold)

        def cost(theta: torch.Tensor) -> torch.Tensor:  # [n, p] → [n]
            pred = unicycle_observe(unicycle_step(s[:, None], u[:, None], theta[None], self.dt))
            residual = observation_difference(y[:, None], pred)
            delta = theta - prior_mean
            return residual.square().sum((0, 2)) / self.obs_noise_std ** 2 + ((delta @ precision) * delta).sum(1)

        std = (self.cem_std_scale * (torch.diagonal(cov) + 1e-6).sqrt()).clamp(self.cem_std_min, self.cem_std_max)
        elites = max(1, int(self.cem_samples * self.cem_elite_frac))
        mean = cem_minimize(cost, prior_mean, std, self._cem_gen, self.cem_samples, elites, self.cem_iterations,
                            self.param_low, self.param_high, frozen=~active)
        fisher_diag = torch.diagonal(self.history_fisher(mean))
        self._mean, self._cov = mean, gaussian_posterior_cov(cov, fisher_diag, active)

    # ------------------------------------------------------------------ one iteration
    def iterate(self, iteration: int) -> dict[str, float]:
        rows = [self.env_step() for _ in range(self.steps_per_iteration)]
        return {**{k: sum(r[k] for r in rows) / len(rows) for k in rows[-1]}, "train/env_steps": float(self._env_steps)}

    def env_step(self) -> dict[str, float]:
        has_history = self._history["s"].shape[0] > 0
        self._mask = self.select()
        if has_history:
            self._max_wheel_gains = max(self._max_wheel_gains, int(self._mask[WHEEL_GAINS].sum()))
        used = torch.ones_like(self._mask) if self.objective == "boed" else self._mask
        score = None if self.objective == "none" else (lambda fim: information(fim, used, self.objective, self.ridge))
        action, row = self._planner.plan(self._state, self._mean, self._plan_gen, score,
                                         fd_steps(self._mean, self.fd_epsilon, self.fd_floor))
        obs, reward, _, _, info = self._env.step(action.numpy())
        self._env_steps += 1
        step = {"s": self._state, "u": action, "y": torch.as_tensor(obs, dtype=DTYPE)}
        self._history = {k: torch.cat([v, step[k][None]]) for k, v in self._history.items()}
        if self._history["s"].shape[0] > self.max_history:
            self.update_posterior()
            self._history = {k: v[1:] for k, v in self._history.items()}
        self._state = torch.as_tensor(info["state"], dtype=DTYPE)
        row.update({"train/goal_distance": float(info["goal_distance"]), "train/reward": float(reward),
                    "mask/size": float(self._mask.sum()),
                    "mask/wheel_gains": float(self._mask[WHEEL_GAINS].sum()),
                    "post/log_var_mean": float(torch.diagonal(self._cov).log().mean()),
                    "post/rmse": self._rmse()})
        return row

    # ------------------------------------------------------------------ evaluation
    def _truth(self) -> torch.Tensor:
        return torch.as_tensor(self._env.unwrapped.theta, dtype=DTYPE)

    def _rmse(self) -> float:
        err = identifiable_parameters(self._mean) - identifiable_parameters(self._truth())
        return float(err.square().mean().sqrt())

    def evaluate(self) -> dict[str, float]:
        """RMSE of the posterior mean on the scored combinations (mass, friction, Σ gains, both biases), on all 8
        parameters and on the ratios to the mass (what data identify), the distance to the goal, and the most wheel
        gains the identifiable set ever held (selections from data only: before any, S is every parameter)."""
        truth = self._truth()
        distance = float(np.linalg.norm(self._state[:2].numpy() - np.asarray(self.goal)))
        return {"eval/rmse": self._rmse(), "eval/rmse_all": float((self._mean - truth).square().mean().sqrt()),
                "eval/ratio_rmse": float((mass_ratios(self._mean) - mass_ratios(truth)).square().mean().sqrt()),
                "eval/goal_distance": distance, "eval/mask_max_wheel_gains": float(self._max_wheel_gains)}

    # ------------------------------------------------------------------ state
    def weights(self) -> dict[str, dict[str, torch.Tensor]]:
        return {"posterior": {"mean": self._mean.clone(), "cov": self._cov.clone()},
                "planner": self._planner.state_dict()}

    def load_weights(self, weights: dict[str, dict[str, torch.Tensor]]) -> None:
        self._mean, self._cov = weights["posterior"]["mean"].to(DTYPE), weights["posterior"]["cov"].to(DTYPE)
        self._planner.load_state_dict(weights["planner"])

    def training_state(self) -> dict[str, Any]:
        import cloudpickle  # gymnasium's dependency; the environment holds its true θ, state and noise generator

        return {"env": cloudpickle.dumps(self._env), "state": self._state, "history": dict(self._history),
                "mask": self._mask, "max_wheel_gains": self._max_wheel_gains, "env_steps": self._env_steps,
                "plan_gen": self._plan_gen.get_state(), "cem_gen": self._cem_gen.get_state()}

    def load_training_state(self, state: dict[str, Any]) -> None:
        import cloudpickle

        self._env.close()
        self._env = cloudpickle.loads(state["env"])
        self._state, self._history, self._mask = state["state"], dict(state["history"]), state["mask"]
        self._max_wheel_gains, self._env_steps = state["max_wheel_gains"], state["env_steps"]
        self._plan_gen.set_state(state["plan_gen"])
        self._cem_gen.set_state(state["cem_gen"])
