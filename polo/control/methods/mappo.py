"""``method: mappo``: multi-agent PPO with one actor shared by the agents (MAPPO-PIS's learner, docs/control.md).

The environment gives one observation row per agent (``[n, d]``, flattened) and a ``MultiDiscrete([k] * n)``
action; the ``shared_actor`` policy scores each agent's action from its own row, so every (environment copy,
step, agent) carries its own log-prob, ratio and clip in the registered ``ppo_clip``. Two critics:

* ``critic.input: state`` (default): a centralised ``V(s)`` over the concatenation of every agent's row (the
  whole flattened observation), GAE over the episode boundaries, one advantage per step that every agent shares
  (the reward is the agents' mean, so their advantages are equal);
* ``critic.input: local_q``: the released code's per-agent ``Q(o_i, a_i)``. Rows become (environment copy,
  agent) pairs with the baseline ``Q_target(o_i, a_i)`` from a copy of Q refreshed every ``critic.target_every``
  iterations and the bootstrap ``Q(o_T, a_T)`` at a fresh sample ``a_T``; with ``advantage.lam: 1`` the
  registered ``gae`` then yields that code's Monte-Carlo advantage ``A_i = G − Q_target(o_i, a_i)`` and its
  critic target ``G``. One difference stays: ratios are taken against the behaviour policy, not a periodically
  copied actor.
"""
from __future__ import annotations

import copy
from typing import Any, Callable, Literal

import torch
from pydantic import Field

from polo.control.envs.vector import EnvSettings
from polo.control.methods.base import CONTROL_METHODS
from polo.control.methods.ppo import PPO
from polo.control.policies.agent_q import AgentQNetwork
from polo.control.policies.spaces import flat_dim
from polo.control.policies.value import CriticSettings
from polo.core.registry import ConfigError


class MultiAgentCriticSettings(CriticSettings):
    input: Literal["state", "local_q"] = "state"
    """state: centralised V(s) over every agent's observation; local_q: per-agent Q(o_i, a_i) (the released code)."""
    target_every: int = Field(3, ge=1)
    """local_q: iterations between hard copies of Q into the target that gives the baselines."""


def _zero_values(obs: torch.Tensor) -> torch.Tensor:
    return obs.new_zeros(obs.shape[0])


@CONTROL_METHODS.register("mappo")
class MAPPO(PPO):
    """PPO over agents that share one actor; see the module docstring for the two critics."""

    paper = ("MAPPO-PIS: A Multi-Agent Proximal Policy Optimization Method with Prior Intent Sharing for CAVs' "
             "Cooperative Decision-Making (arXiv:2408.06656)")
    provenance = "RECONSTRUCTED"
    panels = (("eval/return", "evaluation return (deterministic)"), ("eval/collision", "evaluation collision rate"),
              ("eval/speed", "evaluation mean speed (m/s)"), ("eval/merged", "ramp agents merged"),
              ("policy/entropy", "entropy per agent"), ("loss/value", "value loss"))

    env: EnvSettings = Field(default_factory=lambda: EnvSettings(id="polo/Merge1D-v0", num_envs=8,
                                                                 normalize_obs=False, normalize_reward=False))
    policy: dict[str, Any] = Field(default_factory=lambda: {
        "name": "shared_actor", "agent": {"name": "categorical", "hidden": [128, 128], "activation": "relu"}})
    critic: MultiAgentCriticSettings = Field(
        default_factory=lambda: MultiAgentCriticSettings(hidden=[128, 128], activation="relu"))

    def setup(self, seed: int, log: Callable[[str], Any]) -> None:
        if self.critic.input == "local_q" and self.engine.get("bootstrap_truncation", "off") != "off":
            raise ConfigError("critic.input: local_q bootstraps Q at the rollout's end only; set "
                              "engine.bootstrap_truncation: 'off'")
        super().setup(seed, log)
        if self.critic.input == "local_q":
            self._target = copy.deepcopy(self._critic).requires_grad_(False)

    def build_critic(self, envs) -> torch.nn.Module:
        nvec = getattr(envs.single_action_space, "nvec", None)
        if nvec is None or nvec.ndim != 1:
            raise ConfigError(f"method mappo needs a MultiDiscrete action space (one entry per agent), got "
                              f"{envs.single_action_space}")
        self._agents = len(nvec)
        if self.critic.input == "state":
            return super().build_critic(envs)
        if len(self.critic.hidden) != 1:
            raise ConfigError(f"critic.input: local_q has one hidden width (Q(o, a)'s layers), got "
                              f"critic.hidden={self.critic.hidden}")
        row = flat_dim(envs.single_observation_space) // self._agents
        return AgentQNetwork(row, int(nvec[0]), self.critic.hidden[0], self.critic.activation)

    # ------------------------------------------------------------------ per-agent critic (local_q)
    def iterate(self, iteration: int) -> dict[str, float]:
        if self.critic.input == "local_q" and (iteration - 1) % self.critic.target_every == 0:
            self._target.load_state_dict(self._critic.state_dict())
        return super().iterate(iteration)

    def _q(self, network, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """``Q(o_i, a_i)`` ``[..., n]`` from joint observations ``[..., n·d]`` and actions ``[..., n]``."""
        return network(obs.reshape(*obs.shape[:-1], self._agents, -1), action)

    @torch.no_grad()
    def collect(self):
        """state: the engine's batch. local_q: its rows repeated per agent, each with that agent's log-probs,
        baselines ``Q_target(o_i, a_i)`` and bootstrap ``Q(o_T, a_T)``."""
        if self.critic.input == "state":
            return super().collect()
        batch = self._engine.rollout(self._policy, _zero_values, self._generator)
        n = self._agents
        agent_rows = lambda x: x.transpose(1, 2).reshape(-1, x.shape[1])  # noqa: E731  [N, T, n] -> [N·n, T]
        final = self._engine.obs
        last = self._policy.act(final, self._generator)["action"]
        rows = batch.select(torch.arange(batch.batch_size).repeat_interleave(n))
        rows.values = agent_rows(self._q(self._target, batch.extras["obs"], batch.extras["act.action"]))
        rows.old_logp = agent_rows(batch.old_logp)
        rows.extras["bootstrap_value"] = self._q(self._critic, final, last).reshape(-1)
        return rows

    def step_tensors(self, batch) -> dict[str, torch.Tensor]:
        """local_q: the (copy, agent) rows folded back to steps ``[N·T]`` with one column per agent."""
        if self.critic.input == "state":
            return super().step_tensors(batch)
        n, T = self._agents, batch.values.shape[1]
        per_agent = lambda x: x.reshape(-1, n, T).transpose(1, 2).reshape(-1, n)  # noqa: E731 [N·n, T] -> [N·T, n]
        steps = super().step_tensors(batch.select(torch.arange(0, batch.batch_size, n)))
        steps.update({k: per_agent(getattr(batch, k)) for k in ("old_logp", "values", "advantages", "returns")})
        return steps

    def critic_values(self, mb: dict[str, torch.Tensor]) -> torch.Tensor:
        if self.critic.input == "state":
            return super().critic_values(mb)
        return self._q(self._critic, mb["obs"], mb["act.action"])

    # ------------------------------------------------------------------ state
    def weights(self) -> dict[str, dict[str, torch.Tensor]]:
        out = super().weights()
        if self.critic.input == "local_q":
            out["critic_target"] = self._target.state_dict()
        return out

    def load_weights(self, weights: dict[str, dict[str, torch.Tensor]]) -> None:
        super().load_weights(weights)
        if self.critic.input == "local_q":
            self._target.load_state_dict(weights["critic_target"])
