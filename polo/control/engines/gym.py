"""The ``gym`` engine: a control policy acting in vectorised gymnasium environments for T steps.

Storage is time-major (``[T, N, ...]``, preallocated); the batch it hands over has one row per environment copy
(``[N, T]``: ``old_logp`` (``[N, T, factors]`` for a factored policy), ``values``, ``extras["step_rewards"]``, ``extras["dones"]``, the observations and the
policy's action record), which GAE reads with the episode boundaries inside each row (polo.core.advantages.gae).
``d_t = 1`` means an episode ended after step t; copies reset in the same step (same-step autoreset), so the next
observation stored is the new episode's first. At a time-limit truncation the recursion does not bootstrap
unless ``bootstrap_truncation`` adds ``γ·V`` of the final observation (``final_obs``, the exact form) or of the
current one (``current_obs``, PolicyFlow's code) to the step's reward.
"""
from __future__ import annotations

from typing import Any, Literal

import numpy as np
import torch
from pydantic import Field
from torch import Tensor

from polo.control.engines.base import CONTROL_ENGINES
from polo.control.envs.snapshot import restore, snapshot
from polo.control.envs.vector import EnvSettings, finished_episodes, make_vector_env
from polo.core.batch import RolloutBatch
from polo.core.registry import Component


def obs_tensor(obs: Any) -> Tensor:
    return torch.as_tensor(np.asarray(obs), dtype=torch.float32)


def env_action(action: Tensor) -> np.ndarray:
    """What the environments receive: integer actions as int64, the rest as float32."""
    a = action.detach().cpu().numpy()
    return a.astype(np.int64) if not action.is_floating_point() else a.astype(np.float32)


def action_rows(old_logp: Tensor, advantages: Tensor, extras: dict[str, Tensor] | None = None) -> RolloutBatch:
    """M environment steps as M rows in the form the language-model policy losses and aggregations score: one
    action per row (``old_logp`` ``[M]``), or one per factor (``[M, n]``: agents or knobs, each with its own
    ratio, like the tokens of a response); ``advantages`` ``[M]`` is broadcast over the factors (``[M, n]``: one
    per factor)."""
    logp = old_logp if old_logp.dim() == 2 else old_logp[:, None]
    m, n = logp.shape
    return RolloutBatch(prompt_ids=torch.zeros(m, 0, dtype=torch.long), prompt_mask=torch.zeros(m, 0, dtype=torch.long),
                        response_ids=torch.zeros(m, n, dtype=torch.long), response_mask=torch.ones(m, n, dtype=torch.long),
                        group=torch.arange(m), rewards=torch.zeros(m, 1), old_logp=logp,
                        advantages=advantages if advantages.dim() == 2 else advantages[:, None].expand(m, n),
                        extras=extras or {})


@CONTROL_ENGINES.register("gym")
class GymEngine(Component):
    """Rollouts of ``num_steps`` steps in each copy of a vectorised gymnasium environment (control recipes,
    ``kind: control``)."""

    paper = "Proximal Policy Optimization Algorithms (arXiv:1707.06347)"
    provenance = "CODE"

    num_steps: int = Field(2048, ge=1)
    """T: steps per environment copy per rollout."""
    bootstrap_truncation: Literal["off", "final_obs", "current_obs"] = "off"
    """At a truncation add γ·V(final observation) / γ·V(current observation) to the reward; off: treat it as a
    termination (CleanRL)."""

    def start(self, env: EnvSettings, gamma: float, seed: int) -> None:
        """Build the environment copies and reset them with seeds ``seed, seed+1, …``."""
        self._gamma = gamma
        self._envs = make_vector_env(env, gamma)
        obs, _ = self._envs.reset(seed=seed)
        self._obs = obs_tensor(obs)
        self._episodes: list[tuple[float, int]] = []

    def restart(self) -> None:
        """Reset every copy now, so that the next rollout starts fresh episodes (TGPO sets each copy's time
        allocation between rollouts)."""
        obs, _ = self._envs.reset()
        self._obs = obs_tensor(obs)

    @property
    def envs(self):
        return self._envs

    @property
    def obs(self) -> Tensor:
        """The observation the next rollout starts from ``[N, ...]`` (read-only)."""
        return self._obs

    @property
    def num_envs(self) -> int:
        return self._envs.num_envs

    def state(self) -> dict[str, Any]:
        """The environments' state (simulators, running statistics, random generators) as plain data
        (polo.control.envs.snapshot: no pickled code in a checkpoint), and the current observations."""
        return {"envs": snapshot(self._envs), "obs": self._obs}

    def load_state(self, state: dict[str, Any]) -> None:
        restore(self._envs, state["envs"])
        self._obs = state["obs"]

    def take_episodes(self) -> list[tuple[float, int]]:
        """(return, length) of every episode finished since the last call."""
        done, self._episodes = self._episodes, []
        return done

    @torch.no_grad()
    def rollout(self, policy, critic, generator: torch.Generator) -> RolloutBatch:
        """T steps of every copy; ``critic`` (obs → ``[N]``) gives ``values`` and the bootstrap value."""
        T, N = self.num_steps, self.num_envs
        obs_buf = torch.empty(T, *self._obs.shape)
        rewards, dones, values = (torch.zeros(T, N) for _ in range(3))
        records: dict[str, Tensor] = {}  # the policy's record per step, "logp" ([N] or [N, factors]) among them
        for t in range(T):
            obs_buf[t] = self._obs
            out = policy.act(self._obs, generator)
            values[t] = critic(self._obs)
            for key, value in out.items():
                if key not in records:
                    records[key] = torch.empty(T, *value.shape, dtype=value.dtype)
                records[key][t] = value
            obs, reward, terminated, truncated, infos = self._envs.step(env_action(out["action"]))
            reward = torch.as_tensor(reward, dtype=torch.float32)
            if self.bootstrap_truncation != "off" and truncated.any():
                cut = torch.as_tensor(truncated & ~terminated)
                source = self._obs if self.bootstrap_truncation == "current_obs" else obs_tensor(
                    np.stack([infos["final_obs"][i] if c else np.asarray(obs[i]) for i, c in enumerate(cut.tolist())]))
                reward = reward + self._gamma * critic(source) * cut
            rewards[t], dones[t] = reward, torch.as_tensor(terminated | truncated, dtype=torch.float32)
            self._episodes.extend(zip(*finished_episodes(infos)))
            self._obs = obs_tensor(obs)
        bootstrap = critic(self._obs)
        rows = lambda x: x.transpose(0, 1).contiguous()  # noqa: E731  [T, N, ...] -> [N, T, ...]
        extras = {"step_rewards": rows(rewards), "dones": rows(dones), "bootstrap_value": bootstrap,
                  "obs": rows(obs_buf), **{f"act.{k}": rows(v) for k, v in records.items() if k != "logp"}}
        return RolloutBatch(prompt_ids=torch.zeros(N, 0, dtype=torch.long), prompt_mask=torch.zeros(N, 0, dtype=torch.long),
                            response_ids=torch.zeros(N, T, dtype=torch.long), response_mask=torch.ones(N, T, dtype=torch.long),
                            group=torch.arange(N), rewards=rewards.sum(0)[:, None], reward_names=("env",),
                            old_logp=rows(records["logp"]), values=rows(values), extras=extras)
