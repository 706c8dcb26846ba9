"""Inputs scored by re-reading the student's own responses with teacher forcing (no gradient).

The ``teacher`` role (polo/roles/teacher.py) re-reads every response under up to three prompt variants, one
batched forward each, over the rows that have that variant:

* plain prompt: ``teacher_logp`` ``[B,T]`` (the sampled tokens) and ``teacher_dist`` (log-probs ``[B,T,V]``);
* with a correct sibling's response (``sibling_template``): ``teacher_dist_sibling``, ``sibling_present``
  ``[B]`` (1 where the group has a correct row other than the row itself, picked at random) and
  ``sibling_entropy_weight`` ``[B,T]``: SRPO's ``exp(−s·H(q))`` normalised to mean 1 over the tokens of the
  routed rows (failed, with a correct sibling) of the whole batch, 0 elsewhere (``s``: the components'
  ``entropy_sharpness``);
* with an incorrect sibling's response (``negative_template``): ``teacher_dist_negative`` and
  ``negative_present`` ``[B]``.

With ``roles.teacher.top_k`` = k below the vocabulary size, each distribution is ``[B,T,k]``: the log-probs at
one set of token ids per position, ``teacher_dist_ids`` ``[B,T,k]``, the teacher's top-k of the first variant
scored for the row (plain, then sibling, then negative), so the variants share one support; the remaining mass
is the consumer's tail bin (``polo.core.distill.with_tail``). Rows without a variant hold zeros there.

``rubric_contrast`` ``[B,T]`` (CoRT) needs no role: ``log π_old(y_t | x with rubric) − log π_old(y_t | x)``,
the behaviour policy re-reading the response with the example's ``rubric`` column in its prompt
(``rubric_template``), minus the same under the example's own prompt.
"""
from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor

from polo.core.credit.cort import RUBRIC_TEMPLATE
from polo.core.distill import entropy, fill_invalid, with_tail
from polo.core.model_prompts import ModelPrompts, PromptQuery
from polo.core.registry import ConfigError
from polo.core.segment import masked_mean
from polo.engines.base import Rollouts
from polo.inputs.base import ProviderContext, component_setting, register_provider
from polo.tasks.base import Example, reprompt

PLAIN = ("teacher_logp", "teacher_dist")
SIBLING = ("teacher_dist_sibling", "sibling_present", "sibling_entropy_weight")
NEGATIVE = ("teacher_dist_negative", "negative_present")
VARIANTS = ((SIBLING, "sibling_template", True), (NEGATIVE, "negative_template", False))
"""The privileged prompt variants: the inputs each serves, the teacher setting holding its template and whether
the sibling it shows is a correct one."""


def pick_siblings(group: Tensor, candidate: Tensor, generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """For each row a uniformly random other row of its group with ``candidate`` set: ``(index [B], present
    [B] bool)``; ``present`` is False (and ``index`` meaningless) where the group has no such other row."""
    B = len(group)
    eligible = (group[:, None] == group[None, :]) & candidate.bool()[None, :]
    eligible &= ~torch.eye(B, dtype=torch.bool, device=group.device)
    scores = torch.rand(B, B, generator=generator).to(group.device)
    return torch.where(eligible, scores, -1.0).argmax(-1), eligible.any(-1)


def score(policy, rollouts: Rollouts, rows: Tensor, examples: list[Example], temperature: float,
          full: bool = True) -> dict:
    """One no-grad teacher-forced forward of ``policy`` over the responses of ``rows`` under ``examples``'
    prompts: ``logp`` ``[n,T]`` and (``full``) ``logprobs_full`` ``[n,T,V]``, left on the policy's device (a top-k
    is taken there, before anything crosses to the host)."""
    batch = rollouts.batch
    ids, mask = policy.encode_prompts(examples)
    responses = batch.response_ids[rows].to(policy.device), batch.response_mask[rows].to(policy.device)
    return policy.forward_logp(ids, mask, *responses, temperature=temperature, return_full=full)


def teacher_context(query: PromptQuery) -> list[ModelPrompts]:
    """The privileged prompts of the variants the run needs, each filled with a sibling's response and followed
    by the response re-read (both at most ``max_new`` tokens). A ``path`` teacher has a context of its own, known
    only once it is loaded: none are returned for it."""
    teacher = query.roles["teacher"]
    if teacher.source == "path":
        return []
    return [ModelPrompts("roles.teacher", f"the prompt with {'a correct' if correct else 'an incorrect'} sibling",
                         f"roles.teacher.{setting}", "shorten the template",
                         [reprompt(e, getattr(teacher, setting), solution="") for e in query.examples],
                         [(query.max_new, "tokens of the sibling's response"), (query.max_new, "response tokens")])
            for names, setting, correct in VARIANTS if query.needs & set(names)]


@register_provider(*PLAIN, *SIBLING, *NEGATIVE, roles={"teacher"}, prompts=teacher_context)
@torch.no_grad()
def teacher_forward(ctx: ProviderContext, rollouts: Rollouts) -> dict[str, Tensor]:
    """The teacher's distributions on the student's responses, one forward per prompt variant (module doc)."""
    batch, needs, teacher = rollouts.batch, ctx.needs, ctx.models["teacher"]
    settings, B, home = teacher.settings, batch.batch_size, batch.response_ids.device
    correct = batch.extras["correct"].bool()
    everyone = torch.arange(B, device=correct.device)
    variants = []  # (distribution name, rows, prompts)
    got: dict[str, Tensor] = {}
    if needs & set(PLAIN):
        variants.append(("teacher_dist", everyone, list(rollouts.examples)))
    for names, setting, want_correct in VARIANTS:
        if needs & set(names):
            index, present = pick_siblings(batch.group, correct if want_correct else ~correct, ctx.generator)
            got[names[1]] = present.to(batch.mask.dtype)
            rows = present.nonzero().squeeze(-1)
            prompts = [reprompt(rollouts.examples[i], getattr(settings, setting), solution=rollouts.completions[j])
                       for i, j in zip(rows.tolist(), index[rows].tolist())]
            variants.append((names[0], rows, prompts))
    vocab = teacher.hf_model.config.vocab_size
    k = settings.top_k if settings.top_k < vocab else 0
    T = batch.response_ids.shape[1]
    support = torch.zeros((B, T, k), dtype=torch.long, device=correct.device) if k else None
    covered = torch.zeros(B, dtype=torch.bool, device=correct.device)
    for name, rows, prompts in variants:
        dist = torch.zeros((B, T, k or vocab), device=correct.device)
        if len(rows):
            out = score(teacher, rollouts, rows, prompts, ctx.temperature)
            full = out["logprobs_full"]
            if name == "teacher_dist":
                got["teacher_logp"] = out["logp"].to(home)
            if k:
                new = ~covered[rows]
                support[rows[new]] = full[new.to(full.device)].topk(k, -1).indices.to(home)
                covered[rows] = True
                full = full.gather(-1, support[rows].to(full.device))
            dist[rows] = full.to(home)
        got[name] = dist
    if support is not None:
        got["teacher_dist_ids"] = support
    if "sibling_entropy_weight" in needs:
        valid = (got["sibling_present"].bool() & ~correct)[:, None] & batch.response_mask.bool()
        logq = fill_invalid(got["teacher_dist_sibling"], valid, vocab)
        sharpness = component_setting(ctx.components.values(), "entropy_sharpness", 1.0)
        got["sibling_entropy_weight"] = entropy_weight(logq if support is None else with_tail(logq), valid,
                                                       sharpness).to(batch.mask)
    return {name: value for name, value in got.items() if name in needs or name == "teacher_dist_ids"}


def entropy_weight(logq: Tensor, valid: Tensor, sharpness: float) -> Tensor:
    """``w = exp(−s·H(q)) / mean_valid exp(−s·H(q))`` on the ``valid`` ``[B,T]`` tokens, 0 elsewhere (H over the
    last dim of the log-probs ``logq``: the vocabulary, or top-k plus tail bin)."""
    raw = torch.exp(-sharpness * entropy(logq))
    weight = raw / masked_mean(raw, valid.to(raw)).clamp_min(torch.finfo(raw.dtype).tiny)
    return torch.where(valid, weight, 0.0)


def rubric_prompts(components, examples: Sequence[Example]) -> list[Example]:
    """Each example's prompt with its rubric (its ``rubric`` column, else the components' ``default_rubric``;
    neither is an error) in the components' ``rubric_template``."""
    template = component_setting(components, "rubric_template", RUBRIC_TEMPLATE)
    default = component_setting(components, "default_rubric", None)
    prompts = []
    for example in examples:
        rubric = example.columns.get("rubric", default)
        if rubric is None:
            raise ConfigError(f"input 'rubric_contrast' reads each example's 'rubric' column; the example with "
                              f"prompt {example.prompt!r:.80} has none (columns: {sorted(example.columns)}): use a "
                              f"task whose rows carry a rubric (a jsonl or hf_dataset task with a 'rubric' field) "
                              f"or set the credit's default_rubric")
        prompts.append(reprompt(example, template, rubric=str(rubric)))
    return prompts


def rubric_context(query: PromptQuery) -> list[ModelPrompts]:
    """The rubric-conditioned prompts, each followed by the response re-read; named after the component holding
    the rubric settings (CoRT's ``credit``)."""
    key = next((k for k, c in query.components.items() if hasattr(c, "rubric_template")), None)
    label = f"{key}.{query.components[key].registry_name}" if key else "input rubric_contrast"
    template = f"{key}.rubric_template" if key else "RUBRIC_TEMPLATE"
    rubric = (f"{key}.default_rubric" if key and any("rubric" not in e.columns for e in query.examples)
              else "the examples' rubric column")
    return [ModelPrompts(label, "the rubric-conditioned prompt", f"{rubric} + prompt in {template}",
                         "shorten the rubric", rubric_prompts(query.components.values(), query.examples),
                         [(query.max_new, "response tokens")])]


@register_provider("rubric_contrast", prompts=rubric_context)
@torch.no_grad()
def rubric_contrast(ctx: ProviderContext, rollouts: Rollouts) -> dict[str, Tensor]:
    """``rubric_contrast`` ``[B,T]``: the behaviour policy's log-probs of the response tokens with the
    example's rubric in the prompt (``rubric_prompts``) minus those under the prompt the response was sampled from
    (module doc)."""
    batch = rollouts.batch
    prompts = rubric_prompts(ctx.components.values(), rollouts.examples)
    with_rubric = score(ctx.policy, rollouts, torch.arange(batch.batch_size), prompts, ctx.temperature, full=False)
    plain = ctx.policy.forward_logp(batch.prompt_ids, batch.prompt_mask, batch.response_ids, batch.response_mask,
                                    temperature=ctx.temperature)
    return {"rubric_contrast": (with_rubric["logp"].to(plain["logp"].device) - plain["logp"]) * batch.mask}
