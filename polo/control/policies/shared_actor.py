"""One actor shared by the n agents of a multi-agent environment (MAPPO's parameter sharing).

The environment's observation holds one row per agent (``[n, d]``, flattened by the wrappers to ``n·d``) and
its action space is ``MultiDiscrete([k] * n)``. The shared actor runs one agent's policy — any registered
control policy, built for a single ``[d]`` observation and a ``Discrete(k)`` action — on every row:
``π(a|s) = Π_i π_θ(a_i | o_i)``, with one log-prob per agent ``[B, n]`` (each agent its own ratio and clip in
the policy loss, like the tokens of a response) and the agents' mean entropy.
"""
from __future__ import annotations

from typing import Any

import torch
from pydantic import Field
from torch import Tensor

from polo.control.policies.base import CONTROL_POLICIES, ActionScore, ControlPolicy, ControlPolicySettings
from polo.control.policies.spaces import flat_dim


class SharedActor(ControlPolicy):
    """``agent`` applied to each of ``agents`` observation rows; every record entry gains an agent axis."""

    def __init__(self, agent: ControlPolicy, agents: int):
        super().__init__()
        self.agent, self.agents = agent, agents

    def _rows(self, obs: Tensor) -> Tensor:
        return obs.reshape(obs.shape[0] * self.agents, -1)

    def act(self, obs: Tensor, generator: torch.Generator | None = None, deterministic: bool = False
            ) -> dict[str, Tensor]:
        out = self.agent.act(self._rows(obs), generator, deterministic)
        return {k: v.reshape(obs.shape[0], self.agents, *v.shape[1:]) for k, v in out.items()}

    def evaluate(self, obs: Tensor, record: dict[str, Tensor]) -> ActionScore:
        b = obs.shape[0]
        score = self.agent.evaluate(self._rows(obs), {k: v.reshape(b * self.agents, *v.shape[2:])
                                                      for k, v in record.items()})
        per_agent = lambda x: None if x is None else x.reshape(b, self.agents)  # noqa: E731
        return ActionScore(per_agent(score.logp), per_agent(score.entropy).mean(-1), score.aux_loss,
                           per_agent(score.kl), score.metrics)

    def end_update(self) -> None:
        self.agent.end_update()


@CONTROL_POLICIES.register("shared_actor")
class SharedActorSettings(ControlPolicySettings):
    """Parameter sharing across agents: the ``agent`` policy on each agent's observation row."""

    paper = "The Surprising Effectiveness of PPO in Cooperative, Multi-Agent Games (arXiv:2103.01955)"
    provenance = "CODE"

    agent: dict[str, Any] = Field(default_factory=lambda: {"name": "categorical", "hidden": [64, 64]})
    """The per-agent policy (a registered control policy) that every agent shares."""

    def build(self, observation_space: Any, action_space: Any) -> ControlPolicy:
        import gymnasium

        nvec = getattr(action_space, "nvec", None)
        if nvec is None or nvec.ndim != 1 or len(set(int(k) for k in nvec)) != 1:
            raise ValueError(f"policy shared_actor needs a MultiDiscrete([k] * agents) action space, got {action_space}")
        agents, size = len(nvec), flat_dim(observation_space)
        if size % agents:
            raise ValueError(f"policy shared_actor: the observation's {size} numbers do not split into "
                             f"{agents} equal agent rows")
        row = gymnasium.spaces.Box(-float("inf"), float("inf"), (size // agents,))
        agent = CONTROL_POLICIES.build(self.agent, "policy.agent").build(row, gymnasium.spaces.Discrete(int(nvec[0])))
        return SharedActor(agent, agents)
