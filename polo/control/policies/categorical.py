"""Discrete action heads: one categorical (Discrete), factored categoricals (MultiDiscrete: one per agent or
knob, each with its own ratio) and independent Bernoullis (MultiBinary: set-valued actions)."""
from __future__ import annotations

from typing import Any

import torch
from pydantic import Field
from torch import Tensor

from polo.control.math.distributions import (bernoulli_entropy, bernoulli_logp, categorical_entropy,
                                             categorical_logp)
from polo.control.policies.base import CONTROL_POLICIES, ActionScore, ControlPolicy, ControlPolicySettings
from polo.control.policies.nets import mlp
from polo.control.policies.spaces import flat_dim


class FactoredCategoricalPolicy(ControlPolicy):
    """``π(a|s) = Π_i softmax(z_i(s))_{a_i}`` over ``len(sizes)`` factors, logits from one MLP (``hidden = []``
    and ``tabular``: state-free logits, a learned table). ``joint``: ``logp`` is the sum over factors ``[B]``;
    else one log-prob per factor ``[B, n]``, which the policy loss treats like the tokens of a row (a ratio and a
    clip each: the multi-agent form)."""

    def __init__(self, obs_dim: int, sizes: list[int], hidden: list[int], activation: str, tabular: bool,
                 joint: bool):
        super().__init__()
        self.sizes, self.tabular, self.joint = sizes, tabular, joint
        total = sum(sizes)
        if tabular:
            self.table = torch.nn.Parameter(torch.zeros(total))
        else:
            self.net = mlp(obs_dim, hidden, total, activation, out_gain=0.01)
        self.register_buffer("offsets", torch.tensor([0, *sizes]).cumsum(0)[:-1], persistent=False)
        width = max(sizes)
        pad = torch.full((len(sizes), width), float("-inf"))
        for i, n in enumerate(sizes):
            pad[i, :n] = 0.0
        self.register_buffer("pad", pad, persistent=False)

    def logits(self, obs: Tensor) -> Tensor:
        """``[B, n, max size]``; entries beyond a factor's size are −inf."""
        flat = self.table.expand(obs.shape[0], -1) if self.tabular else self.net(obs)
        index = (self.offsets[:, None] + torch.arange(self.pad.shape[1])).clamp(max=flat.shape[-1] - 1)
        return flat[:, index] + self.pad

    def _reduce(self, x: Tensor) -> Tensor:
        return x.sum(-1) if self.joint else x

    def act(self, obs: Tensor, generator: torch.Generator | None = None, deterministic: bool = False
            ) -> dict[str, Tensor]:
        logits = self.logits(obs)
        if deterministic:
            action = logits.argmax(-1)
        else:
            probs = torch.softmax(logits, -1).reshape(-1, logits.shape[-1])
            action = torch.multinomial(probs, 1, generator=generator).reshape(logits.shape[:-1])
        return {"action": action, "logp": self._reduce(categorical_logp(logits, action))}

    def evaluate(self, obs: Tensor, record: dict[str, Tensor]) -> ActionScore:
        logits = self.logits(obs)
        entropy = torch.nan_to_num(categorical_entropy(logits.clamp_min(-1e9)))
        return ActionScore(self._reduce(categorical_logp(logits, record["action"])), entropy.sum(-1))


class SingleCategoricalPolicy(FactoredCategoricalPolicy):
    """One categorical over a Discrete space: the factored head with one factor, actions and log-probs ``[B]``."""

    def act(self, obs, generator=None, deterministic=False):
        out = super().act(obs, generator, deterministic)
        return {"action": out["action"][:, 0], "logp": out["logp"]}

    def evaluate(self, obs, record):
        return super().evaluate(obs, {"action": record["action"][:, None]})


class BernoulliPolicy(ControlPolicy):
    """``π(x|s) = Π_c σ(z_c)^{x_c} (1 − σ(z_c))^{1 − x_c}`` over C binary choices (set-valued actions);
    ``logp`` one per choice ``[B, C]`` unless ``joint`` (their sum)."""

    def __init__(self, obs_dim: int, choices: int, hidden: list[int], activation: str, tabular: bool, joint: bool):
        super().__init__()
        self.tabular, self.joint = tabular, joint
        if tabular:
            self.table = torch.nn.Parameter(torch.zeros(choices))
        else:
            self.net = mlp(obs_dim, hidden, choices, activation, out_gain=0.01)

    def logits(self, obs: Tensor) -> Tensor:
        return self.table.expand(obs.shape[0], -1) if self.tabular else self.net(obs)

    def act(self, obs, generator=None, deterministic=False):
        logits = self.logits(obs)
        if deterministic:
            x = (logits > 0).to(torch.int64)
        else:
            x = torch.bernoulli(torch.sigmoid(logits), generator=generator).to(torch.int64)
        logp = bernoulli_logp(logits, x)
        return {"action": x, "logp": logp.sum(-1) if self.joint else logp}

    def evaluate(self, obs, record):
        logits = self.logits(obs)
        logp = bernoulli_logp(logits, record["action"])
        return ActionScore(logp.sum(-1) if self.joint else logp, bernoulli_entropy(logits).sum(-1))


class _DiscreteSettings(ControlPolicySettings):
    hidden: list[int] = Field(default_factory=lambda: [64, 64])
    activation: str = "tanh"
    tabular: bool = False
    """State-free logits (a learned table): bandits with a constant observation."""
    joint: bool = False
    """One log-prob per sample (the sum over factors/choices): one ratio for the joint action."""


@CONTROL_POLICIES.register("categorical")
class CategoricalSettings(_DiscreteSettings):
    """A categorical head over a Discrete space, or factored categoricals over a MultiDiscrete one."""

    def build(self, observation_space: Any, action_space: Any) -> ControlPolicy:
        obs_dim = flat_dim(observation_space)
        if hasattr(action_space, "nvec"):
            return FactoredCategoricalPolicy(obs_dim, [int(n) for n in action_space.nvec], self.hidden,
                                             self.activation, self.tabular, self.joint)
        if hasattr(action_space, "n"):
            return SingleCategoricalPolicy(obs_dim, [int(action_space.n)], self.hidden, self.activation, self.tabular,
                                           True)
        raise ValueError(f"policy categorical needs a Discrete or MultiDiscrete action space, got {action_space}")


@CONTROL_POLICIES.register("bernoulli")
class BernoulliSettings(_DiscreteSettings):
    """Independent Bernoulli choices over a MultiBinary space."""

    def build(self, observation_space: Any, action_space: Any) -> ControlPolicy:
        n = getattr(action_space, "n", None)
        if n is None or not hasattr(action_space, "shape") or hasattr(action_space, "nvec"):
            raise ValueError(f"policy bernoulli needs a MultiBinary action space, got {action_space}")
        return BernoulliPolicy(flat_dim(observation_space), int(n) if isinstance(n, int) else int(sum(action_space.shape)),
                               self.hidden, self.activation, self.tabular, self.joint)
