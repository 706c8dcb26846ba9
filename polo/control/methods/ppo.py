"""``method: ppo``: on-policy actor-critic for control policies (CleanRL's continuous-action PPO as the default).

Each iteration: T steps in N environment copies (the ``gym`` engine) → advantages from the registered advantage
estimator (GAE over the episode boundaries) → ``epochs`` passes over shuffled minibatches of single steps, each
scored by the registered policy loss and aggregation of the language-model side (the same ``ppo_clip`` and
``token_mean``), plus the clipped value loss, the entropy bonus and the policy's own auxiliary term, in one
optimizer step with the global gradient norm clipped. PolicyFlow, TGPO and MAPPO-PIS reuse this loop with
another policy, state or critic.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Literal

import numpy as np
import torch
from pydantic import Field, model_validator

from polo.control.engines.base import CONTROL_ENGINES
from polo.control.engines.gym import action_rows, env_action, obs_tensor
from polo.control.envs.vector import EnvSettings, freeze_normalization, make_vector_env
from polo.control.methods.base import CONTROL_METHODS, ControlMethod
from polo.control.methods.epochs import clipped_step, minibatch_epochs
from polo.control.policies.base import CONTROL_POLICIES
from polo.control.policies.spaces import flat_dim
from polo.control.policies.value import CriticSettings
from polo.core.aggregation import StepCounts
from polo.core.losses.value import clipped_value_loss
from polo.core.registry import ADVANTAGES, AGGREGATIONS, POLICY_LOSSES


def adapt_kl_lr(lr: float, kl: float, desired: float) -> float:
    """KL-adaptive learning rate (RSL-RL / SKRL): ÷1.5 (floor 1e-6) when KL > 2·desired, ×1.5 (cap 1e-2) when
    KL < desired/2, else unchanged."""
    if kl > 2 * desired:
        return max(lr / 1.5, 1e-6)
    if kl < desired / 2:
        return min(lr * 1.5, 1e-2)
    return lr


def standardize_advantages(adv: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """``(Â − mean Â) / (std Â + eps)`` over the minibatch, ``std`` unbiased: CleanRL's form, with eps added to
    the std. (The language-model path's ``masked_whiten`` divides by ``sqrt(var + eps)``; the two agree to ~4e-9
    on ordinary minibatches but not when std ≲ sqrt(eps) = 1e-4: at std 1e-6 this gives values ≈ 1, that ~0.01.)"""
    return (adv - adv.mean()) / (adv.std() + eps)


@CONTROL_METHODS.register("ppo")
class PPO(ControlMethod):
    """``L = L_pg − c_ent·H + c_v·L_v (+ the policy's auxiliary loss)`` per minibatch; ``L_pg`` the policy loss
    (``ppo_clip``: ``mean max(−Â·ρ, −Â·clip(ρ, 1−ε, 1+ε))``), ``Â`` standardised per minibatch (``norm_adv``:
    ``(Â − mean) / (std + 1e-8)``, CleanRL's),
    ``L_v = ½·mean max((V − R)², (V_clip − R)²)`` with ``V_clip = V_old + clip(V − V_old, ±value_clip)``
    (``value_loss: clipped_only``: ``mean (V_clip − R)²``, PolicyFlow's form)."""

    paper = "Proximal Policy Optimization Algorithms (arXiv:1707.06347)"
    provenance = "CODE"

    env: EnvSettings = Field(default_factory=EnvSettings)
    engine: dict[str, Any] = Field(default_factory=lambda: {"name": "gym"})
    policy: dict[str, Any] = Field(default_factory=lambda: {"name": "gaussian"})
    critic: CriticSettings = Field(default_factory=CriticSettings)
    advantage: dict[str, Any] = Field(default_factory=lambda: {"name": "gae", "gamma": 0.99, "lam": 0.95,
                                                               "whiten": False})
    policy_loss: dict[str, Any] = Field(default_factory=lambda: {"name": "ppo_clip"})
    aggregation: dict[str, Any] = Field(default_factory=lambda: {"name": "token_mean"})
    total_steps: int | None = Field(None, ge=1)
    """Environment steps in all; sets ``iterations`` = total_steps // (num_envs · num_steps)."""
    epochs: int = Field(10, ge=1)
    minibatches: int = Field(32, ge=1)
    lr: float = Field(3e-4, gt=0)
    lr_schedule: Literal["linear", "constant", "kl_adaptive"] = "linear"
    """linear: lr·(1 − (k−1)/K) at iteration k; kl_adaptive: ``adapt_kl_lr`` after every epoch."""
    desired_kl: float = Field(0.01, gt=0)
    optimizer: Literal["adam", "adamw"] = "adam"
    adam_eps: float = Field(1e-5, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    max_grad_norm: float = Field(0.5, gt=0)
    vf_coef: float = Field(0.5, ge=0)
    ent_coef: float = 0.0
    value_clip: float | None = Field(0.2, gt=0)
    value_loss: Literal["max", "clipped_only"] = "max"
    norm_adv: Literal["minibatch", "none"] = "minibatch"
    """Standardise advantages per minibatch (CleanRL); ``advantage.whiten: true`` does it once per batch instead."""
    target_kl: float | None = Field(None, gt=0)
    """Stop the epochs once the last minibatch's approx. KL exceeds it."""
    eval_episodes: int = Field(10, ge=1)
    eval_seed: int = 1_000_000
    eval_max_steps: int = Field(10_000, ge=1)

    @model_validator(mode="after")
    def _iterations_from_steps(self):
        if self.total_steps is not None:
            per = self.env.num_envs * int(self.engine.get("num_steps", 2048))
            if self.total_steps < per:
                raise ValueError(f"total_steps={self.total_steps} is less than one iteration "
                                 f"(num_envs × engine.num_steps = {per})")
            if "iterations" in self.model_fields_set and self.iterations != self.total_steps // per:
                raise ValueError(f"iterations={self.iterations} and total_steps={self.total_steps} disagree "
                                 f"({self.total_steps} // {per} steps per iteration = {self.total_steps // per}); "
                                 f"give one of them")
            object.__setattr__(self, "iterations", self.total_steps // per)
        return self

    @model_validator(mode="after")
    def _components_exist(self):
        """Build every registered part once, so that an unknown name or setting fails when the recipe loads."""
        for registry, config, key in ((CONTROL_ENGINES, self.engine, "engine"), (CONTROL_POLICIES, self.policy, "policy"),
                                      (ADVANTAGES, self.advantage, "advantage"),
                                      (POLICY_LOSSES, self.policy_loss, "policy_loss"),
                                      (AGGREGATIONS, self.aggregation, "aggregation")):
            registry.build(config, key)
        return self

    def derived_fields(self) -> set[str]:
        return {"iterations"} if self.total_steps is not None else set()

    # ------------------------------------------------------------------ setup
    def setup(self, seed: int, log: Callable[[str], Any]) -> None:
        self._engine = CONTROL_ENGINES.build(self.engine, "engine")
        self._advantage = ADVANTAGES.build(self.advantage, "advantage")
        self._loss = POLICY_LOSSES.build(self.policy_loss, "policy_loss")
        self._aggregation = AGGREGATIONS.build(self.aggregation, "aggregation")
        self._gamma = float(self._advantage.gamma)
        self._engine.start(self.env, self._gamma, seed)
        envs = self._engine.envs
        self._policy = CONTROL_POLICIES.build(self.policy, "policy").build(envs.single_observation_space,
                                                                           envs.single_action_space)
        self._critic = self.build_critic(envs)
        params = [*self._policy.parameters(), *self._critic.parameters()]
        cls = torch.optim.AdamW if self.optimizer == "adamw" else torch.optim.Adam
        self._optimizer = cls(params, lr=self.lr, eps=self.adam_eps, weight_decay=self.weight_decay)
        self._generator = torch.Generator().manual_seed(seed)
        self._global_step = 0
        self._seed = seed

    def build_critic(self, envs) -> torch.nn.Module:
        """The value network (a centralised critic overrides this)."""
        return self.critic.build(flat_dim(envs.single_observation_space))

    def critic_values(self, mb: dict[str, torch.Tensor]) -> torch.Tensor:
        """The critic's values of a minibatch's steps (a state–action critic overrides this)."""
        return self._critic(mb["obs"])

    @property
    def steps_per_iteration(self) -> int:
        return self._engine.num_envs * self._engine.num_steps

    # ------------------------------------------------------------------ one iteration
    def iterate(self, iteration: int) -> dict[str, float]:
        import time

        if self.lr_schedule == "linear":
            for g in self._optimizer.param_groups:
                g["lr"] = (1.0 - (iteration - 1) / self.iterations) * self.lr
        t0 = time.perf_counter()
        self._policy.eval()
        batch = self.collect()
        result = self._advantage(batch)
        batch.advantages, batch.returns = result.advantages, result.returns
        t1 = time.perf_counter()
        row = self.update(batch)
        t2 = time.perf_counter()
        self._global_step += self.steps_per_iteration
        episodes = self._engine.take_episodes()
        if episodes:
            row["train/episode_return"] = sum(r for r, _ in episodes) / len(episodes)
            row["train/episode_length"] = sum(n for _, n in episodes) / len(episodes)
        row.update({"train/env_steps": self._global_step, "train/step_reward": float(batch.extras["step_rewards"].mean()),
                    "time/rollout": t1 - t0, "time/update": t2 - t1,
                    "perf/steps_per_s": self.steps_per_iteration / max(t2 - t0, 1e-9)})
        return row

    def collect(self):
        """One rollout batch (rows = environment copies); methods that change the state or the rows override it."""
        return self._engine.rollout(self._policy, self._critic, self._generator)

    def step_tensors(self, batch) -> dict[str, torch.Tensor]:
        """The batch's ``[N, T]`` rows flattened to ``[N·T]`` steps: obs, action record, old log-probs, values,
        advantages and returns."""
        flat = lambda x: x.reshape(-1, *x.shape[2:])  # noqa: E731
        out = {"obs": flat(batch.extras["obs"]), "old_logp": flat(batch.old_logp), "values": flat(batch.values),
               "advantages": flat(batch.advantages), "returns": flat(batch.returns)}
        out.update({k: flat(v) for k, v in batch.extras.items() if k.startswith("act.")})
        return out

    def update(self, batch) -> dict[str, float]:
        steps = self.step_tensors(batch)
        params = [p for g in self._optimizer.param_groups for p in g["params"]]

        def after_epoch(means: dict[str, float], last: dict[str, float]) -> bool:
            if self.lr_schedule == "kl_adaptive":
                for g in self._optimizer.param_groups:
                    g["lr"] = adapt_kl_lr(g["lr"], means["policy/kl"], self.desired_kl)
            return self.target_kl is not None and last["policy/approx_kl"] > self.target_kl

        row = minibatch_epochs(self._policy, steps["obs"].shape[0], self.epochs, self.minibatches, self._generator,
                               lambda rows: self.minibatch_step({k: v[rows] for k, v in steps.items()}, params),
                               after_epoch)
        values, returns = steps["values"], steps["returns"]
        row["value/explained_variance"] = float(1 - (returns - values).var() / returns.var().clamp_min(1e-12))
        row["optim/lr"] = self._optimizer.param_groups[0]["lr"]
        return row

    def minibatch_step(self, mb: dict[str, torch.Tensor], params) -> dict[str, float]:
        record = {k[4:]: v for k, v in mb.items() if k.startswith("act.")}
        score = self._policy.evaluate(mb["obs"], record)
        adv = mb["advantages"]
        if self.norm_adv == "minibatch" and adv.numel() > 1:
            adv = standardize_advantages(adv)
        rows = action_rows(mb["old_logp"], adv)
        out = self._loss(score.logp if score.logp.dim() == 2 else score.logp[:, None], rows)
        pg = self._aggregation(out.token_loss, rows.mask, StepCounts.from_mask(rows.response_mask, 1))
        v = self.critic_values(mb)
        if not self.critic.enabled:  # V ≡ 0: nothing to regress
            v_loss = v.new_zeros(())
        elif self.value_loss == "max":
            v_loss = clipped_value_loss(v, mb["values"], mb["returns"], self.value_clip).mean()
        else:  # PolicyFlow: squared error of the clipped prediction only
            clip = self.value_clip or math.inf
            v_loss = ((mb["values"] + (v - mb["values"]).clamp(-clip, clip) - mb["returns"]) ** 2).mean()
        entropy = score.entropy.mean()
        loss = pg - self.ent_coef * entropy + self.vf_coef * v_loss
        if score.aux_loss is not None:
            loss = loss + score.aux_loss
        grad_norm = clipped_step(self._optimizer, params, loss, self.max_grad_norm)
        with torch.no_grad():
            log_ratio = score.logp.detach() - mb["old_logp"]  # [M] or [M, factors]
            ratio = log_ratio.exp()
            approx_kl = float(((ratio - 1) - log_ratio).mean())
            clip = float(self._loss.clip_low) if hasattr(self._loss, "clip_low") else 0.2
            stats = {"loss/policy": float(pg.detach()), "loss/value": float(v_loss.detach()),
                     "policy/entropy": float(entropy.detach()), "policy/approx_kl": approx_kl,
                     "policy/kl": float(score.kl.mean()) if score.kl is not None else approx_kl,
                     "policy/clip_frac": float(((ratio - 1).abs() > clip).float().mean()),
                     "optim/grad_norm": grad_norm}
        if score.aux_loss is not None:
            stats["loss/aux"] = float(score.aux_loss.detach())
        stats.update({f"policy/{k}": float(v) for k, v in out.metrics.items()})
        stats.update(score.metrics)
        return stats

    # ------------------------------------------------------------------ evaluation
    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        """``eval_episodes`` episodes of the deterministic policy (observations normalised with the statistics
        training reached, frozen), one per environment copy, seeds ``eval_seed + k``; the undiscounted return."""
        returns, final = self.rollout_episodes(self._policy, self.eval_episodes, self.eval_seed)
        row = {"eval/return": float(returns.mean()), "eval/return_min": float(returns.min()),
               "eval/return_max": float(returns.max())}
        row.update({f"eval/{k}": float(v.mean()) for k, v in final.items()})
        return row

    def before_eval_reset(self, envs) -> None:
        """Hook: configure fresh evaluation copies before their first reset (TGPO sets each copy's time
        allocation); nothing by default."""

    def rollout_episodes(self, policy, episodes: int, seed: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """One episode per copy of ``episodes`` fresh copies, deterministic actions: the undiscounted returns
        ``[episodes]`` (RecordEpisodeStatistics, before reward normalisation) and every number the environment put
        in the info of an episode's last step (``success``, ``collision``, ...), one value per episode."""
        envs = make_vector_env(self.env, self._gamma, episodes)
        self.before_eval_reset(envs)
        freeze_normalization(self._engine.envs, envs)  # before the reset: the first observation is normalised too
        obs, _ = envs.reset(seed=seed)
        totals, finished = torch.zeros(episodes, dtype=torch.float64), torch.zeros(episodes, dtype=torch.bool)
        final_values: dict[str, torch.Tensor] = {}
        for _ in range(self.eval_max_steps):
            action = policy.act(obs_tensor(obs), deterministic=True)["action"]
            obs, _, terminated, truncated, infos = envs.step(env_action(action))
            ended = torch.as_tensor(terminated | truncated) & ~finished
            if ended.any():
                info = infos["final_info"]
                totals[ended] = torch.as_tensor(info["episode"]["r"], dtype=torch.float64)[ended]
                for key, value in info.items():
                    value = np.asarray(value)
                    if key.startswith("_") or key == "episode" or value.dtype.kind not in "biuf" or value.ndim != 1:
                        continue
                    column = final_values.setdefault(key, torch.full((episodes,), float("nan"), dtype=torch.float64))
                    column[ended] = torch.as_tensor(value, dtype=torch.float64)[ended]
                finished |= ended
            if finished.all():
                break
        envs.close()
        return totals[finished], {k: v[finished] for k, v in final_values.items()}

    # ------------------------------------------------------------------ state
    def weights(self) -> dict[str, dict[str, torch.Tensor]]:
        return {"policy": self._policy.state_dict(), "critic": self._critic.state_dict()}

    def load_weights(self, weights: dict[str, dict[str, torch.Tensor]]) -> None:
        self._policy.load_state_dict(weights["policy"])
        self._critic.load_state_dict(weights["critic"])

    def training_state(self) -> dict[str, Any]:
        return {"optimizer": self._optimizer.state_dict(), "generator": self._generator.get_state(),
                "global_step": self._global_step, "engine": self._engine.state(),
                "policy_extra": self._policy_extra_state()}

    def load_training_state(self, state: dict[str, Any]) -> None:
        self._optimizer.load_state_dict(state["optimizer"])
        self._generator.set_state(state["generator"])
        self._global_step = state["global_step"]
        self._engine.load_state(state["engine"])
        self._load_policy_extra_state(state["policy_extra"])

    def _policy_extra_state(self) -> dict[str, Any]:
        extra = getattr(self._policy, "extra_state", None)
        return extra() if extra else {}

    def _load_policy_extra_state(self, state: dict[str, Any]) -> None:
        if state:
            self._policy.load_extra_state(state)
