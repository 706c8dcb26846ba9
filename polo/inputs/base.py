"""Input providers: the extra inputs components declare (``Component.needs()``), computed once per step.

A provider is a function ``(context, rollouts) -> {name: tensor}`` registered under the input names it
writes, with the model roles it needs (``roles``, built by the trainer only when a chosen component needs
the input). The trainer writes each returned tensor into the batch under its name: a ``RolloutBatch`` field
(``ref_logp``, ``values``, ``old_logp``) or ``extras[name]``. A provider registered under several names
(one forward serving many inputs) is called once per step and computes the names in ``context.needs``.
Plugins register more with ``@register_provider(name, roles={...})``; one that renders text for a model (a
privileged prompt, a judge's text) also passes ``prompts=`` those texts, which the context check reads
(polo.core.model_prompts), and one that needs something of the task (an environment's gold answer) passes ``check=``,
which the trainer calls before anything is trained or rolled out.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch import Tensor

from polo.core.model_prompts import ModelPrompts, PromptQuery
from polo.core.registry import METHODS, Registry
from polo.core.segment import run_starts
from polo.engines.base import Engine, Rollouts
from polo.tasks.base import Task

PROVIDERS: Registry = Registry("input", ("polo.inputs", METHODS))
PRIVILEGED_TEMPLATE = " The ground truth answer is {answer}."


@dataclass
class ProviderContext:
    """What a provider may use: the policy, the built role models, the engine, the task, the components."""

    policy: Any
    models: dict[str, Any]
    engine: Engine
    task: Task
    components: dict[str, Any]
    needs: set[str]
    temperature: float = 1.0
    generator: torch.Generator = field(default_factory=torch.Generator)
    metrics: dict[str, float] = field(default_factory=dict)
    """What providers report for the step's metrics row (e.g. a judge's failure count); the trainer logs and
    clears it after each step."""


class Provider:
    """A registered provider: ``fn(context, rollouts) -> {name: tensor}``, the roles it needs, ``prompts(query)
    -> [ModelPrompts]``: the texts it renders for a model besides the task's prompts (polo.core.model_prompts), and
    ``check(task) -> str | None``: what the task lacks for it (None: nothing)."""

    def __init__(self, fn: Callable[[ProviderContext, Rollouts], dict[str, Tensor]], roles: frozenset[str],
                 prompts: Callable[[PromptQuery], list[ModelPrompts]] | None = None,
                 check: Callable[[Task], str | None] | None = None):
        self.fn, self.roles = fn, roles
        self.prompts = prompts or (lambda query: [])
        self.check = check or (lambda task: None)
        self.__doc__ = fn.__doc__

    def __call__(self, context: ProviderContext, rollouts: Rollouts) -> dict[str, Tensor]:
        return self.fn(context, rollouts)


def register_provider(*names: str, roles: set[str] | frozenset[str] = frozenset(),
                      prompts: Callable[[PromptQuery], list[ModelPrompts]] | None = None,
                      check: Callable[[Task], str | None] | None = None):
    """Decorator registering ``fn(context, rollouts) -> {name: tensor}`` as the provider of ``names``; ``prompts``:
    the texts it renders for a model, for the context check; ``check(task)``: what the task lacks for it, or None."""

    def decorator(fn):
        provider = Provider(fn, frozenset(roles), prompts, check)
        for name in names:
            PROVIDERS.register(name)(provider)
        return fn

    return decorator


def _sequence(batch) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    return batch.prompt_ids, batch.prompt_mask, batch.response_ids, batch.response_mask


def component_setting(components, name: str, default: Any) -> Any:
    """The value of the field ``name`` on the components that have one (they must agree); ``default`` if none."""
    values = {getattr(c, name) for c in components if hasattr(c, name)}
    if len(values) > 1:
        raise ValueError(f"components ask for different {name} values {sorted(values, key=repr)}")
    return values.pop() if values else default


def hidden_layer(components) -> int:
    """The hidden layer the components read (``hidden_layer`` field); they must agree."""
    return component_setting(components, "hidden_layer", -1)


@register_provider("entropy_old", "sum_pi_sq", "old_dist", "hidden", "rollout_logp")
@torch.no_grad()
def behaviour_forward(ctx: ProviderContext, rollouts: Rollouts) -> dict[str, Tensor]:
    """One no-grad forward of the policy that generated the batch: ``entropy_old`` ``[B,T]`` (entropy of
    π_old), ``sum_pi_sq`` ``[B,T]`` (Σ_v π_old(v)²), ``old_dist`` ``[B,T,V]`` (log π_old), ``hidden``
    ``[B,Tp+T,d]`` (the components' ``hidden_layer``), and ``rollout_logp``: the engine's own log-probs, with
    ``old_logp`` replaced by the trainer's recomputation (their gap is what rollout correction weighs)."""
    batch, needs = rollouts.batch, ctx.needs
    full = bool(needs & {"sum_pi_sq", "old_dist"})
    layer = hidden_layer(ctx.components.values()) if "hidden" in needs else None
    out = ctx.policy.forward_logp(*_sequence(batch), temperature=ctx.temperature,
                                  return_entropy="entropy_old" in needs, return_full=full, hidden_layer=layer,
                                  **ctx.policy.model_inputs(batch))
    got: dict[str, Tensor] = {}
    if "rollout_logp" in needs:
        got["rollout_logp"], got["old_logp"] = batch.old_logp, out["logp"]
    if "entropy_old" in needs:
        got["entropy_old"] = out["entropy"]
    if "sum_pi_sq" in needs:
        got["sum_pi_sq"] = (2 * out["logprobs_full"]).exp().sum(-1) * batch.mask
    if "old_dist" in needs:
        got["old_dist"] = out["logprobs_full"]
    if layer is not None:
        got["hidden"] = out["hidden_states"]
    return got


@register_provider("ref_logp", "ref_dist", roles={"reference"})
@torch.no_grad()
def reference_forward(ctx: ProviderContext, rollouts: Rollouts) -> dict[str, Tensor]:
    """``ref_logp`` ``[B,T]`` (and ``ref_dist`` ``[B,T,V]``, the full log π_ref) under the frozen reference."""
    reference = ctx.models["reference"]
    out = reference.forward_logp(*_sequence(rollouts.batch), temperature=ctx.temperature,
                                 return_full="ref_dist" in ctx.needs, **reference.model_inputs(rollouts.batch))
    got = {"ref_logp": out["logp"]}
    if "ref_dist" in ctx.needs:
        got["ref_dist"] = out["logprobs_full"]
    return got


@register_provider("values", roles={"critic"})
@torch.no_grad()
def critic_values(ctx: ProviderContext, rollouts: Rollouts) -> dict[str, Tensor]:
    """``values`` ``[B,T]``: the critic's V(s_t) before each response token."""
    return {"values": ctx.models["critic"](*_sequence(rollouts.batch))}


def privileged_texts(examples) -> list[str]:
    """Prompt ⊕ "The ground truth answer is {answer}." for the reference-guided critic (ReDiPPO)."""
    return [e.prompt + PRIVILEGED_TEMPLATE.format(answer=e.answer) for e in examples]


def privileged_context(query: PromptQuery) -> list[ModelPrompts]:
    """The reference-guided critic's prompts, each followed by a response."""
    return [ModelPrompts("roles.privileged_critic", "the prompt with the ground-truth answer",
                         "the task's prompt and answer in PRIVILEGED_TEMPLATE", "shorten the prompts or answers",
                         privileged_texts(query.examples), [(query.max_new, "response tokens")])]


@register_provider("values_privileged", roles={"privileged_critic"}, prompts=privileged_context)
@torch.no_grad()
def privileged_values(ctx: ProviderContext, rollouts: Rollouts) -> dict[str, Tensor]:
    """``values_privileged`` ``[B,T]``: the reference-guided critic's values, which sees the ground-truth answer
    in its prompt (``privileged_prompt_ids``/``_mask`` are kept for its own update)."""
    batch = rollouts.batch
    ids, mask = ctx.policy.encode_prompts(privileged_texts(rollouts.examples))
    values = ctx.models["privileged_critic"](ids, mask, batch.response_ids, batch.response_mask)
    return {"values_privileged": values, "privileged_prompt_ids": ids, "privileged_prompt_mask": mask}


@register_provider("greedy_reward")
@torch.no_grad()
def greedy_reward(ctx: ProviderContext, rollouts: Rollouts) -> dict[str, Tensor]:
    """Scalar reward of one greedy completion per group, broadcast to the group's rows (ReMax's baseline)."""
    batch = rollouts.batch
    first = run_starts(batch.group)
    rows = first.nonzero().squeeze(-1).tolist()
    greedy = ctx.engine.rollout(ctx.policy, [rollouts.examples[i] for i in rows],
                                batch.extras["prompt_index"][rows].tolist(), ctx.generator,
                                samples_per_prompt=1, greedy=True)
    return {"greedy_reward": greedy.batch.scalar_reward()[torch.cumsum(first.long(), 0) - 1]}


def first_occurrence(ids: Tensor, pattern: Tensor) -> Tensor:
    """``[B]`` the first position where ``pattern`` starts in each row of ``ids`` (``ids.shape[1]`` if none)."""
    B, T = ids.shape
    n = len(pattern)
    if n == 0 or n > T:
        return torch.full((B,), T if n else 0, dtype=torch.long)
    hit = (ids.unfold(1, n, 1) == pattern).all(-1)  # [B, T - n + 1]
    return torch.where(hit.any(-1), hit.long().argmax(-1), torch.full((B,), T))


@register_provider("reasoning_mask")
def reasoning_mask(ctx: ProviderContext, rollouts: Rollouts) -> dict[str, Tensor]:
    """``reasoning_mask`` ``[B,T]``: 1 on the response tokens before the task's ``answer_marker`` (the marker's
    token ids searched in the response), every response token when the task has no marker."""
    batch = rollouts.batch
    mask = batch.response_mask.bool()
    marker = ctx.task.answer_marker
    if marker:
        pattern = torch.tensor(ctx.policy.tokenizer(marker, add_special_tokens=False)["input_ids"])
        start = first_occurrence(batch.response_ids, pattern.to(batch.response_ids.device))
        mask = mask & (torch.arange(mask.shape[1], device=mask.device) < start[:, None])
    return {"reasoning_mask": mask.to(batch.mask.dtype)}
