"""A run built once: every component, role and the input plan of a recipe, typed (``build_run``).

Config validation builds the ``Run`` and checks it, ``resolved_tree`` (the run's config.yaml) dumps its settings and
the ``Trainer`` takes its instances: nothing is built twice for one run (tests/train/test_run_built_once.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from polo.core.aggregation import Aggregation
from polo.core.advantages.base import AdvantageEstimator
from polo.core.credit.base import TokenCredit
from polo.core.divergences import Divergence
from polo.core.losses.base import PolicyLoss
from polo.core.optim_hooks import OptimizerHook
from polo.core.registry import (ADVANTAGES, AGGREGATIONS, CREDIT, DIVERGENCES, OPTIMIZER_HOOKS, POLICY_LOSSES,
                                REGULARIZERS, SHAPING, Component, ConfigError, Registry)
from polo.core.regularizers.base import Regularizer
from polo.core.shaping.base import RewardShaping
from polo.roles.base import ROLES, Role
from polo.engines.base import ENGINES, Engine
from polo.prompt_samplers.base import PROMPT_SAMPLERS, PromptSampler
from polo.tasks.rewards import RewardSpec
from polo.train.inputs import InputPlan, plan_inputs

if TYPE_CHECKING:
    from polo.train.config import Recipe

STAGES: dict[str, Registry] = {
    "engine": ENGINES, "prompt_sampler": PROMPT_SAMPLERS, "advantage": ADVANTAGES, "credit": CREDIT,
    "policy_loss": POLICY_LOSSES, "aggregation": AGGREGATIONS, "optimizer_hook": OPTIMIZER_HOOKS,
}
"""Recipe keys that name one registered component each (``credit`` and ``optimizer_hook`` are optional)."""


@dataclass(eq=False)
class Run:
    """The instances one run of ``recipe`` trains with: one component per stage, the shaping terms, the
    regularizers, the KL divergence, the input plan and every role the run builds or the recipe configures."""

    recipe: Recipe
    engine: Engine
    prompt_sampler: PromptSampler
    advantage: AdvantageEstimator
    credit: TokenCredit | None
    policy_loss: PolicyLoss
    aggregation: Aggregation
    optimizer_hook: OptimizerHook | None
    kl: Divergence
    shaping: list[RewardShaping]
    regularizers: list[Regularizer]
    plan: InputPlan
    roles: dict[str, Role]
    """``plan.roles`` (the roles the trainer builds models for) and the recipe's configured roles, by name."""

    @property
    def components(self) -> dict[str, Component]:
        """Every component by its checkpoint key (``keyed_components``)."""
        return keyed_components({key: getattr(self, key) for key in STAGES}, self.kl, self.shaping,
                                self.regularizers)

    @property
    def trained_roles(self) -> dict[str, Role]:
        """The roles whose models the trainer builds (``plan.roles``), in plan order."""
        return {name: self.roles[name] for name in self.plan.roles}

    def tree(self) -> dict[str, Any]:
        """The recipe as a plain tree with every component's and every role's full settings, defaults filled in
        (what the run's config.yaml holds)."""
        tree = self.recipe.model_dump(mode="json")
        for key in STAGES:
            if getattr(self, key) is not None:
                tree[key] = full_settings(getattr(self, key))
        tree["kl"].update(full_settings(self.kl))
        tree["shaping"] = [full_settings(s) for s in self.shaping]
        tree["regularizers"] = [full_settings(r) for r in self.regularizers]
        tree["roles"] = {name: self.roles[name].model_dump(mode="json") for name in sorted(self.roles)}
        return tree


def full_settings(component: Component) -> dict[str, Any]:
    """``{name, every field}`` of a built component."""
    return {"name": component.registry_name, **component.model_dump(mode="json")}


def keyed_components(stages: dict[str, Component | None], kl: Divergence, shaping: list[RewardShaping],
                     regularizers: list[Regularizer]) -> dict[str, Component]:
    """Every component by its checkpoint key, in the order hooks run: the stages (as ``STAGES``, absent optional
    ones left out), ``kl``, ``shaping.i``, ``regularizer.i``."""
    return {**{key: c for key, c in stages.items() if c is not None}, "kl": kl,
            **{f"shaping.{i}": s for i, s in enumerate(shaping)},
            **{f"regularizer.{i}": r for i, r in enumerate(regularizers)}}


def build_run(recipe: Recipe) -> Run:
    """Build every component, the input plan and the roles of ``recipe`` once, checking that they fit each other
    (a ConfigError naming the key otherwise, in the order the checks have always run)."""
    stages = {key: registry.build(getattr(recipe, key), key) if getattr(recipe, key) is not None else None
              for key, registry in STAGES.items()}
    kl = DIVERGENCES.build({"name": recipe.kl.name}, "kl.name")
    shaping = [SHAPING.build(spec, f"shaping[{i}]") for i, spec in enumerate(recipe.shaping)]
    regularizers = [REGULARIZERS.build(spec, f"regularizers[{i}]") for i, spec in enumerate(recipe.regularizers)]
    components = keyed_components(stages, kl, shaping, regularizers)
    check_policy_kind(recipe, stages["engine"])
    plan = plan_inputs(recipe, components)
    check_whole_groups(recipe, components)
    check_kl_target(recipe, stages["advantage"])
    check_group_size(recipe, components)
    configured = {name: build_role(recipe, name) for name in recipe.roles}
    roles = {name: configured[name] if name in configured else build_role(recipe, name)
             for name in sorted(set(plan.roles) | set(configured))}
    run = Run(recipe, **stages, kl=kl, shaping=shaping, regularizers=regularizers, plan=plan, roles=roles)
    check_scale_out(recipe, run)
    for component in components.values():
        component.check_with(components)
    for i, spec in enumerate(recipe.rewards or []):
        try:
            RewardSpec.of(spec)
        except ConfigError as err:
            raise ConfigError(f"rewards[{i}]: {err}") from None
    return run


def build_role(recipe: Recipe, name: str) -> Role:
    """The role ``name`` with the recipe's settings for it (``roles.NAME``), defaults otherwise."""
    settings = recipe.roles.get(name) or {}
    if not isinstance(settings, dict):
        raise ConfigError(f"roles.{name}: expected a mapping of settings, got {settings!r}")
    return ROLES.build({"name": name, **settings}, f"roles.{name}")


def check_policy_kind(recipe: Recipe, engine: Engine) -> None:
    """Refuse an engine that cannot roll out ``model.kind``."""
    kinds = engine.policy_kinds
    if recipe.model.kind not in kinds:
        raise ConfigError(f"engine {engine.registry_name!r} rolls out {' or '.join(sorted(kinds))} "
                          f"policies, but model.kind={recipe.model.kind!r}: choose an engine for that kind")


def check_whole_groups(recipe: Recipe, components: dict[str, Component]) -> None:
    """Refuse a micro-batch size that would split the groups a component needs whole."""
    size, G = recipe.train.micro_batch_size, recipe.rollout.samples_per_prompt
    whole = sorted(f"{key} {c.registry_name}" for key, c in components.items() if c.whole_groups)
    if whole and size is not None and size % G:
        raise ConfigError(f"train.micro_batch_size={size} would split groups of rollout.samples_per_prompt={G}, "
                          f"and {', '.join(whole)} needs whole groups in every micro-batch: use a multiple of {G} "
                          f"or leave train.micro_batch_size unset")


def check_group_size(recipe: Recipe, components: dict[str, Component]) -> None:
    """Refuse ``rollout.samples_per_prompt`` other than the group size a component is defined for."""
    G = recipe.rollout.samples_per_prompt
    for key, component in components.items():
        if component.group_size is not None and component.group_size != G:
            raise ConfigError(f"{key} {component.registry_name} needs exactly {component.group_size} rollouts per "
                              f"prompt; rollout.samples_per_prompt is {G}")


def check_kl_target(recipe: Recipe, advantage: AdvantageEstimator) -> None:
    """Refuse ``kl.target`` when no KL coefficient is in use for the controller to move."""
    reward_coef = getattr(advantage, "kl_coef", 0.0) if advantage.kl_in_reward else 0.0
    if recipe.kl.target is not None and recipe.kl.coef == 0 and reward_coef == 0:
        raise ConfigError(f"kl.target={recipe.kl.target} adapts a KL coefficient, but kl.coef is 0 and advantage "
                          f"{advantage.registry_name} puts no KL in the reward: set kl.coef > 0 (or the "
                          f"advantage's kl_coef) or drop kl.target")


def check_scale_out(recipe: Recipe, run: Run) -> None:
    """Refuse asynchronous RL without a staleness correction, and data-parallel, Ray or asynchronous settings the run's
    engine cannot work under."""
    if recipe.train.async_staleness and not getattr(run.credit, "corrects_stale_samples", False):
        raise ConfigError(f"train.async_staleness={recipe.train.async_staleness} trains on samples of older "
                          f"policies: add credit: {{name: rollout_is}} (it recomputes the behaviour log-probs "
                          f"with the current policy and weights each token by the truncated ratio)")
    if recipe.dist.learners > 1 and recipe.dist.backend == "ray":
        raise ConfigError(f"dist.learners={recipe.dist.learners} data-parallel ranks each generate their share of "
                          f"the prompts; Ray rollout workers (dist.backend: ray) would start on every rank: "
                          f"use dist.backend: local")
    served = run.engine.vllm  # vLLM settings, or None: polo's sampler
    if served is not None and served.sleep and recipe.train.async_staleness:
        raise ConfigError(f"engine.vllm.sleep with train.async_staleness={recipe.train.async_staleness}: the next "
                          f"batches are generated during the update, so vLLM cannot sleep through it; drop one")
    if recipe.dist.shard == "fsdp" and (recipe.train.async_staleness or recipe.dist.backend == "ray"):
        raise ConfigError("dist.shard=fsdp with train.async_staleness > 0 or dist.backend: ray: those generate "
                          "from a copy of the weights (a thread's snapshot, the Ray workers'), which would be "
                          "shards; use dist.shard=replicate with them")
    if recipe.dist.shard == "fsdp" and recipe.rollout.compile_decode:
        raise ConfigError("rollout.compile_decode with dist.shard=fsdp: the sampler decodes with the shards "
                          "gathered inside FSDP's hooks, which polo does not compile; drop rollout.compile_decode")
    if served is not None and served.mode == "server" and recipe.dist.backend == "ray":
        raise ConfigError("engine.vllm.mode=server with dist.backend: ray: the rollout workers would each start a "
                          "server, or all push weights into yours; use mode: colocate (each worker's own vLLM)")
    if recipe.dist.backend == "ray" and run.engine.roles():
        raise ConfigError(f"dist.backend: ray runs the engine on rollout workers, which hold the policy only; engine "
                          f"{run.engine.registry_name!r} also needs the model roles "
                          f"{sorted(run.engine.roles())}: use dist.backend: local")
