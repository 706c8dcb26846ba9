"""``method: graph_grpo``: critic-free, KL-regularised policy gradient with one advantage per binary choice.

Each rollout row (one environment copy, ``engine.num_steps`` = K steps) is one query answered K times: an
episode of exactly K tries at the same observation (AgentGraph's ``attempts``), each try a set of choices x ~
Bernoulli(σ(z)) from the ``bernoulli`` policy and its reward. The K sets of a query give every choice its advantage
(``advantage_level: choice``: the standardised success rate of the sets containing it; ``graph``: the set's group
z-score, the ablation), and the loss polo.control.math.graph_grpo.graph_grpo_loss pulls the sampled choices'
log-probabilities up or down, with β·KL to the initial policy (frozen). PPO's loop collects, evaluates and
checkpoints; this method replaces the update (``epochs`` passes over ``minibatches`` of queries, no ratio, no
critic). PPO's ``advantage``, ``policy_loss``, ``aggregation`` and value settings are not read.
"""
from __future__ import annotations

import copy
from typing import Any, Callable, Literal

import torch
from pydantic import Field, model_validator

from polo.control.envs.vector import EnvSettings
from polo.control.math.distributions import bernoulli_entropy
from polo.control.math.graph_grpo import choice_advantages, graph_advantages, graph_grpo_loss
from polo.control.methods.base import CONTROL_METHODS
from polo.control.methods.epochs import clipped_step, minibatch_epochs
from polo.control.methods.ppo import PPO
from polo.control.policies.categorical import BernoulliPolicy
from polo.control.policies.value import CriticSettings
from polo.core.registry import ConfigError


@CONTROL_METHODS.register("graph_grpo")
class GraphGRPO(PPO):
    """``L = −Σ x·A·log p / Σ x + β·mean KL(Bern(p) ‖ Bern(p_ref)) − c_ent·H`` per minibatch of queries."""

    paper = ("Graph-GRPO: Stabilizing Multi-Agent Topology Learning via Group Relative Policy Optimization "
             "(arXiv:2603.02701)")
    provenance = "RECONSTRUCTED"
    headline = "eval/success"
    panels = (("eval/success", "greedy graph: success rate"),
              ("eval/success_prob", "greedy graph: success probability"),
              ("train/step_reward", "sampled graphs: success rate"), ("policy/kl_ref", "KL to the initial policy"),
              ("policy/entropy", "entropy"), ("adv/abs_mean", "mean |advantage| of the sampled choices"))

    env: EnvSettings = Field(default_factory=lambda: EnvSettings(
        id="polo/AgentGraph-v0", num_envs=16, kwargs={"attempts": 8}, normalize_obs=False, normalize_reward=False))
    """num_envs queries per iteration; each episode is K tries at one query (raw rewards: no reward normalisation)."""
    engine: dict[str, Any] = Field(default_factory=lambda: {"name": "gym", "num_steps": 8})
    """``num_steps`` = K, the sets sampled per query (the environment's episode length)."""
    policy: dict[str, Any] = Field(default_factory=lambda: {"name": "bernoulli", "hidden": [64]})
    """Independent Bernoulli choices (``bernoulli``, ``joint: false``)."""
    critic: CriticSettings = Field(default_factory=lambda: CriticSettings(enabled=False))
    """Always disabled: the advantages come from the groups."""
    advantage_level: Literal["choice", "graph"] = "choice"
    """choice: per-choice success-rate advantages (Graph-GRPO); graph: each set's group z-score on all its choices."""
    beta: float = Field(0.01, ge=0)
    """Weight of the mean KL(Bern(p) ‖ Bern(p_ref)) to the initial policy."""
    eps: float = Field(1e-6, gt=0)
    """Added to the standard deviation of both advantage forms."""
    epochs: int = Field(1, ge=1)
    """Gradient passes over each batch."""
    minibatches: int = Field(1, ge=1)
    """Minibatches of queries per epoch."""
    lr: float = Field(0.01, gt=0)
    """Adam learning rate."""
    lr_schedule: Literal["linear", "constant", "kl_adaptive"] = "constant"
    """constant or linear (decay to 0 over the iterations)."""

    @model_validator(mode="after")
    def _graph_grpo_settings(self):
        if self.critic.enabled:
            raise ValueError("graph_grpo has no critic: leave critic.enabled false")
        if self.lr_schedule == "kl_adaptive":
            raise ValueError("graph_grpo takes lr_schedule linear or constant (kl_adaptive reads PPO's ratio KL)")
        if self.env.normalize_reward:
            raise ValueError("graph_grpo scores choices by the raw rewards: set env.normalize_reward false")
        return self

    def setup(self, seed: int, log: Callable[[str], Any]) -> None:
        super().setup(seed, log)
        if not isinstance(self._policy, BernoulliPolicy) or self._policy.joint:
            raise ConfigError(f"graph_grpo needs policy bernoulli with joint: false (one probability per choice), got "
                              f"policy {self.policy.get('name')!r}")
        self._reference = copy.deepcopy(self._policy).requires_grad_(False)

    def groups(self, batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """A rollout's rows as query groups: choices ``[Q, K, C]``, rewards ``[Q, K]`` and observations ``[Q, d]``;
        a ConfigError unless every row is exactly one episode at one observation."""
        dones, obs = batch.extras["dones"], batch.extras["obs"]
        one_episode = torch.zeros_like(dones)
        one_episode[:, -1] = 1
        if not torch.equal(dones, one_episode) or not torch.equal(obs, obs[:, :1].expand_as(obs)):
            raise ConfigError(f"graph_grpo reads each rollout row (engine.num_steps = {dones.shape[1]} steps of one "
                              "copy) as K tries at one query: every episode must last exactly engine.num_steps steps "
                              "at a fixed observation (AgentGraph: env.kwargs.attempts = engine.num_steps)")
        return batch.extras["act.action"], batch.extras["step_rewards"], obs[:, 0]

    def update(self, batch) -> dict[str, float]:
        x, rewards, obs = self.groups(batch)
        x = x.to(torch.float32)
        if self.advantage_level == "choice":
            adv = choice_advantages(x, rewards, self.eps)[:, None, :]
        else:
            adv = graph_advantages(rewards, self.eps)[:, :, None]
        params = [p for g in self._optimizer.param_groups for p in g["params"]]

        def step(idx: torch.Tensor) -> dict[str, float]:
            logits = self._policy.logits(obs[idx])
            loss, metrics = graph_grpo_loss(logits, self._reference.logits(obs[idx]), x[idx], adv[idx], self.beta)
            entropy = bernoulli_entropy(logits).sum(-1).mean()
            grad_norm = clipped_step(self._optimizer, params, loss - self.ent_coef * entropy, self.max_grad_norm)
            return {**{k: float(v) for k, v in metrics.items()}, "policy/entropy": float(entropy.detach()),
                    "optim/grad_norm": grad_norm}

        row = minibatch_epochs(self._policy, x.shape[0], self.epochs, self.minibatches, self._generator, step)
        row.update({"adv/valid_fraction": float((x.sum(1) > 0).float().mean()),
                    "adv/abs_mean": float((adv.abs() * x).sum() / x.sum().clamp_min(1)),
                    "optim/lr": self._optimizer.param_groups[0]["lr"]})
        return row

    # ------------------------------------------------------------------ state
    def weights(self) -> dict[str, dict[str, torch.Tensor]]:
        return {**super().weights(), "reference": self._reference.state_dict()}

    def load_weights(self, weights: dict[str, dict[str, torch.Tensor]]) -> None:
        super().load_weights(weights)
        self._reference.load_state_dict(weights["reference"])
