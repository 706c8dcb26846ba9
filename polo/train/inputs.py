"""Which inputs a run needs, who provides them, and which model roles that takes.

Components declare inputs by name (``Component.needs()``); the engine writes some itself
(``Engine.provides``); every other one comes from the input provider registered under that name
(polo.inputs.base). The roles the run builds are those the engine and the chosen providers need, plus
the roles that wrap the policy when the recipe configures them. Nothing here names a particular input.
"""
from __future__ import annotations

from dataclasses import dataclass

from polo.core.registry import ConfigError
from polo.roles.base import ROLES
from polo.inputs.base import PROVIDERS, Provider, ProviderContext
from polo.engines.base import Rollouts


@dataclass
class InputPlan:
    needs: set[str]
    """Every input a chosen component reads."""
    providers: list[Provider]
    """The distinct providers to call each step, in registration order of their first needed name."""
    roles: list[str]
    """The model roles to build."""


def required_inputs(components: dict, kl_coef: float) -> set[str]:
    """The union of the components' ``needs()``; the KL term's only when its coefficient is non-zero."""
    needs = set().union(*(c.needs() for key, c in components.items() if key != "kl"))
    return needs | (components["kl"].needs() if kl_coef > 0 else set())


def plan_inputs(recipe, components: dict) -> InputPlan:
    """The providers and roles for the recipe's components; ConfigError for an input nobody provides or a
    configured role that does not exist."""
    engine = components["engine"]
    needs = required_inputs(components, recipe.kl.coef)
    missing = sorted(n for n in needs - engine.provides if n not in PROVIDERS)
    if missing:
        users = sorted(f"{key} {c.registry_name}" for key, c in components.items() if c.needs() & set(missing))
        raise ConfigError(f"{', '.join(users)} need(s) input(s) {missing} that neither engine "
                          f"{engine.registry_name!r} (provides {sorted(engine.provides)}) nor any registered "
                          f"provider supplies; providers: {', '.join(PROVIDERS.names())}")
    providers: list[Provider] = []
    for name in sorted(needs - engine.provides):
        provider = PROVIDERS.get(name)
        if all(provider is not p for p in providers):
            providers.append(provider)
    for name in recipe.roles:
        ROLES.get(name)
    roles = set(engine.roles()).union(*(p.roles for p in providers))
    roles |= {name for name in recipe.roles if ROLES.get(name).wraps_policy}
    return InputPlan(needs, providers, sorted(roles))


def check_task_inputs(plan: InputPlan, components: dict, task) -> None:
    """ConfigError, one line naming the components and the inputs, when the task lacks what a planned provider
    needs (``Provider.check``: an environment without a gold answer for a gold-answer probe), before any work."""
    for provider in plan.providers:
        problem = provider.check(task)
        if problem:
            names = sorted(n for n in plan.needs if n in PROVIDERS and PROVIDERS.get(n) is provider)
            users = sorted(f"{key} {c.registry_name}" for key, c in components.items() if c.needs() & set(names))
            raise ConfigError(f"{', '.join(users)} read(s) input(s) {names}: {problem}")


def provide_inputs(context: ProviderContext, rollouts: Rollouts, plan: InputPlan) -> None:
    """Call each planned provider once and write what it returns into the batch under each name."""
    batch = rollouts.batch
    for provider in plan.providers:
        for name, value in provider(context, rollouts).items():
            batch.set_input(name, value)
