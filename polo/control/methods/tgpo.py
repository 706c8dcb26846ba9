"""``method: tgpo``: PPO on an STL task grounded in time, with critic-guided time allocation.

TGPO: Temporal Grounded Policy Optimization for Signal Temporal Logic Tasks (arXiv:2510.00225); the authors'
code is not released, so the details below are polo's reconstruction.

The environment grounds its formula (polo.control.math.stl): each ``F_[a,b]`` subgoal gets a time τ_k, the
augmented state ``s̃ = [x, t/H, τ/H, flags, ...]`` makes the task Markovian and a stage-wise reward makes it dense.
Each iteration runs one episode per copy (``engine.num_steps`` = H). Before it, every copy gets an allocation:
uniform during the first ``warmup_iterations`` and, afterwards, with probability ``explore``; otherwise the result
of a Metropolis–Hastings chain (``mh_steps`` proposals ``clip(round(τ + σ·ε), a, b)``, accepted with
``min(1, exp((V(s̃_0(τ')) − V(s̃_0(τ)))/T))``) on the critic's value of the initial augmented state, which scores
how achievable an allocation is. Policy and critic then learn by PPO (``method: ppo``). Evaluation draws
``eval_candidates`` uniform allocations per test episode, keeps ``τ* = argmax V(s̃_0(τ))`` and rolls out the
deterministic policy; ``eval/success`` is the satisfaction rate, ``eval/robustness`` the mean ρ(φ).

The environment provides the grounding: ``low``/``high`` (τ windows), ``horizon`` and
``initial_observations(τ [K, m]) -> [K, obs_dim]`` on its unwrapped instance, and the attribute ``next_tau`` its
reset uses (polo/STLNav2D-v0).
"""
from __future__ import annotations

from typing import Any, Callable, Literal

import numpy as np
import torch
from pydantic import Field

from polo.control.engines.gym import obs_tensor
from polo.control.envs.vector import EnvSettings
from polo.control.math.stl import metropolis_hastings, uniform_allocation
from polo.control.methods.base import CONTROL_METHODS
from polo.control.methods.ppo import PPO
from polo.core.registry import ConfigError


@CONTROL_METHODS.register("tgpo")
class TGPO(PPO):
    """PPO whose environment copies start each episode with a time allocation τ chosen by a critic-guided
    Metropolis–Hastings chain (target ∝ exp(V(s̃_0(τ))/T)), uniform during warm-up and for exploration."""

    paper = "TGPO: Temporal Grounded Policy Optimization for Signal Temporal Logic Tasks (arXiv:2510.00225)"
    provenance = "RECONSTRUCTED"
    headline = "eval/success"
    panels = (("eval/success", "test satisfaction rate"), ("eval/robustness", "test robustness ρ(φ)"),
              ("train/episode_return", "training episode return"),
              ("tgpo/allocation_value", "V(s̃₀(τ)) of the training allocations"),
              ("tgpo/mh_acceptance", "Metropolis–Hastings acceptance"), ("loss/value", "value loss"))

    env: EnvSettings = Field(default_factory=lambda: EnvSettings(id="polo/STLNav2D-v0", num_envs=32,
                                                                 normalize_obs=False))
    engine: dict[str, Any] = Field(default_factory=lambda: {"name": "gym", "num_steps": 50})
    policy: dict[str, Any] = Field(default_factory=lambda: {"name": "gaussian", "log_std_init": -0.5})
    epochs: int = Field(4, ge=1)
    minibatches: int = Field(8, ge=1)
    eval_episodes: int = Field(50, ge=1)
    allocation: Literal["mh", "uniform"] = "mh"
    """How training allocations are drawn after warm-up: the critic-guided chain, or uniform (the ablation)."""
    warmup_iterations: int = Field(20, ge=0)
    """Iterations with uniform allocations only (the critic is untrained)."""
    explore: float = Field(0.1, ge=0, le=1)
    """After warm-up, the probability that a copy gets a uniform allocation instead of the chain's."""
    mh_steps: int = Field(20, ge=0)
    """L: proposals per chain (one chain per copy, started from a uniform allocation)."""
    mh_temperature: float = Field(0.05, gt=0)
    """T_mh: the target density is ∝ exp(V/T_mh), V in the critic's units."""
    mh_sigma: float = Field(5.0, gt=0)
    """σ_τ: standard deviation of the proposal's Gaussian step, in time steps (≈ 0.1·H)."""
    mh_pick: Literal["final", "best"] = "final"
    """Which allocation of the chain a copy gets: the last state, or the best-scoring one visited."""
    eval_candidates: int = Field(64, ge=1)
    """K_inf: uniform candidate allocations per test episode; the one with the highest V is rolled out."""

    # ------------------------------------------------------------------ setup
    def setup(self, seed: int, log: Callable[[str], Any]) -> None:
        if self.env.normalize_obs:
            raise ConfigError("method tgpo scores allocations by V of the initial augmented state it builds itself, "
                              "unnormalised: set env.normalize_obs: false")
        super().setup(seed, log)
        model = self._engine.envs.envs[0].unwrapped
        if not all(hasattr(model, k) for k in ("initial_observations", "low", "high", "horizon", "next_tau")):
            raise ConfigError(f"method tgpo needs an environment grounded in time (initial_observations, low, high, "
                              f"horizon, next_tau), e.g. polo/STLNav2D-v0; {self.env.id!r} is not")
        if self._engine.num_steps != model.horizon:
            raise ConfigError(f"method tgpo runs one episode per copy per iteration: set engine.num_steps to the "
                              f"horizon H = {model.horizon}, got {self._engine.num_steps}")
        self._model = model
        self._low, self._high = torch.as_tensor(model.low).long(), torch.as_tensor(model.high).long()
        self._tau_generator = torch.Generator().manual_seed(seed + 1_000_003)
        self._iteration, self._allocation_stats = 0, {}

    @torch.no_grad()
    def allocation_value(self, tau: torch.Tensor) -> torch.Tensor:
        """``V(s̃_0(τ))`` ``[K]`` of allocations ``[K, m]``."""
        return self._critic(obs_tensor(self._model.initial_observations(tau.numpy())))

    # ------------------------------------------------------------------ rollouts
    def iterate(self, iteration: int) -> dict[str, float]:
        self._iteration = iteration
        row = super().iterate(iteration)
        row.update(self._allocation_stats)
        return row

    def collect(self):
        """Draw each copy's allocation, reset the copies with it, then roll out one episode each."""
        tau = self.draw_allocations(self._engine.num_envs)
        self._engine.envs.set_attr("next_tau", [t.numpy() for t in tau])
        self._engine.restart()
        return super().collect()

    def draw_allocations(self, n: int) -> torch.Tensor:
        """``[n, m]`` training allocations for iteration ``self._iteration``."""
        g = self._tau_generator
        tau = uniform_allocation(self._low, self._high, n, g)
        stats = {"tgpo/uniform_fraction": 1.0}
        if self.allocation == "mh" and self._iteration > self.warmup_iterations:
            chain = metropolis_hastings(self.allocation_value, tau, self._low, self._high, self.mh_sigma,
                                        self.mh_temperature, self.mh_steps, g)
            uniform = torch.rand(n, generator=g, dtype=torch.float64) < self.explore
            tau = torch.where(uniform[:, None], tau, chain.final if self.mh_pick == "final" else chain.best)
            stats = {"tgpo/uniform_fraction": float(uniform.double().mean()), "tgpo/mh_acceptance": chain.acceptance}
        stats["tgpo/allocation_value"] = float(self.allocation_value(tau).mean())
        stats.update({f"tgpo/tau_{k}": float(v) for k, v in enumerate(tau.double().mean(0))})
        self._allocation_stats = stats
        return tau

    # ------------------------------------------------------------------ evaluation
    def before_eval_reset(self, envs) -> None:
        """Each test copy gets ``τ* = argmax V(s̃_0(τ))`` over ``eval_candidates`` uniform allocations (drawn from
        a generator seeded with ``eval_seed``, so evaluation never touches the training streams)."""
        g = torch.Generator().manual_seed(self.eval_seed)
        n, k = envs.num_envs, self.eval_candidates
        candidates = uniform_allocation(self._low, self._high, n * k, g)
        values = self.allocation_value(candidates).view(n, k)
        best = values.argmax(1)
        chosen = candidates.view(n, k, -1)[torch.arange(n), best]
        self._eval_value = float(values.max(1).values.mean())
        envs.set_attr("next_tau", [np.asarray(t.numpy()) for t in chosen])

    def evaluate(self) -> dict[str, float]:
        row = super().evaluate()
        row["eval/allocation_value"] = self._eval_value
        return row

    # ------------------------------------------------------------------ state
    def training_state(self) -> dict[str, Any]:
        return {**super().training_state(), "tau_generator": self._tau_generator.get_state()}

    def load_training_state(self, state: dict[str, Any]) -> None:
        super().load_training_state(state)
        self._tau_generator.set_state(state["tau_generator"])
