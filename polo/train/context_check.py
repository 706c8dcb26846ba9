"""The context check: every prompt a run has a model read, with what the model reads after it, fits the model's
positions (``max_position_embeddings``); a run that would read positions the model never learned is refused.

The prompts are the task's (training and held-out, each followed by up to ``max_new`` response tokens) and those
the run's input providers and components render (``Provider.prompts``, ``Component.model_prompts``:
polo.core.model_prompts): a teacher's privileged prompt, CoRT's rubric-conditioned prompt, a judge's text, a
hinted prompt. ``load_policy`` runs the check on the built-in model's shape before the warm start, or on the
loaded checkpoint when ``model.path`` is set.
"""
from __future__ import annotations

from typing import Sequence

import torch

from polo.core.model_prompts import ModelPrompts, PromptQuery
from polo.core.registry import ConfigError
from polo.policy.kinds import policy_class
from polo.policy.policy import Policy
from polo.tasks import Example


def task_prompts(prompts: Sequence[str | Example], max_new: int) -> ModelPrompts:
    """The task's prompts, each followed by up to ``max_new`` response tokens."""
    return ModelPrompts("task", "the longest prompt", "training and held-out examples",
                        "shorten the prompts or answers", list(prompts),
                        [(max_new, "new tokens (rollout.max_new_tokens, by default the task's longest answer + 1)")])


def run_prompts(recipe, task, prompts: Sequence[str | Example], examples: Sequence[Example], max_new: int,
                policy: Policy) -> list[ModelPrompts]:
    """The task's ``prompts`` and what the run's planned input providers and its components render for the
    training ``examples`` (token counts by ``policy``'s tokenizer)."""
    run = recipe.built()

    def tokens(text: str) -> int:
        return len(policy.tokenizer(text, add_special_tokens=False)["input_ids"])

    query = PromptQuery(list(examples), task, max_new, run.components, run.trained_roles, run.plan.needs, tokens)
    found = [task_prompts(prompts, max_new)]
    for provider in run.plan.providers:
        found += provider.prompts(query)
    for key, component in run.components.items():
        found += component.model_prompts(key, query)
    return found


def check_builtin_context(recipe, task, prompts: Sequence[str | Example], examples: Sequence[Example],
                          max_new: int) -> None:
    """The check on the shape of the built-in model ``recipe.model`` describes (its untrained weights, no RNG
    drawn), before anything is trained."""
    with torch.random.fork_rng(devices=[]):
        tiny = policy_class(recipe.model.kind).build_tiny(recipe.model)
    check_context(tiny, run_prompts(recipe, task, prompts, examples, max_new, tiny),
                  "model.tiny.max_position_embeddings", "raise it")


def check_context(policy: Policy, found: Sequence[ModelPrompts], setting: str, remedy: str) -> None:
    """ConfigError, one line naming the text's component and recipe key, when the longest prompt of an entry of
    ``found`` plus its ``extra`` tokens exceeds ``policy``'s positions (``setting`` names where they are set,
    ``remedy`` how to get more)."""
    context = getattr(policy.hf_model.config.get_text_config(), "max_position_embeddings", None)  # a VLM's: its LM's
    if context is None:
        return
    for item in found:
        if not item.prompts:
            continue
        lengths = policy.encode_prompts(item.prompts)[1].sum(1)
        longest = int(lengths.argmax())
        size = int(lengths[longest])
        if size + sum(count for count, _ in item.extra) > context:
            text = getattr(item.prompts[longest], "prompt", item.prompts[longest])
            extra = "".join(f" + {count} {what}" for count, what in item.extra)
            raise ConfigError(f"{item.label}: {item.what} ({item.source}) is {size} tokens{extra}, over the model's "
                              f"{context} positions ({setting}): {remedy} or {item.fix} (the longest: {text!r:.60})")
