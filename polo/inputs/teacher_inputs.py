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

import torch
from torch import Tensor

from polo.core.credit.cort import RUBRIC_TEMPLATE
from polo.core.distill import entropy, fill_invalid, with_tail
from polo.core.registry import ConfigError
from polo.core.segment import masked_mean
from polo.engines.base import Rollouts
from polo.inputs.base import ProviderContext, component_setting, register_provider
from polo.tasks.base import Example, reprompt

PLAIN = ("teacher_logp", "teacher_dist")
SIBLING = ("teacher_dist_sibling", "sibling_present", "sibling_entropy_weight")
NEGATIVE = ("teacher_dist_negative", "negative_present")


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


@register_provider(*PLAIN, *SIBLING, *NEGATIVE, roles={"teacher"})
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
    for names, template, candidate in ((SIBLING, settings.sibling_template, correct),
                                       (NEGATIVE, settings.negative_template, ~correct)):
        if needs & set(names):
            index, present = pick_siblings(batch.group, candidate, ctx.generator)
            got[names[1]] = present.to(batch.mask.dtype)
            rows = present.nonzero().squeeze(-1)
            prompts = [reprompt(rollouts.examples[i], template, solution=rollouts.completions[j])
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


@register_provider("rubric_contrast")
@torch.no_grad()
def rubric_contrast(ctx: ProviderContext, rollouts: Rollouts) -> dict[str, Tensor]:
    """``rubric_contrast`` ``[B,T]``: the behaviour policy's log-probs of the response tokens with the
    example's rubric in the prompt minus those under the prompt the response was sampled from (module doc). The
    rubric is the example's ``rubric`` column, else the components' ``default_rubric``; neither is an error."""
    batch = rollouts.batch
    components = ctx.components.values()
    template = component_setting(components, "rubric_template", RUBRIC_TEMPLATE)
    default = component_setting(components, "default_rubric", None)
    prompts = []
    for example in rollouts.examples:
        rubric = example.columns.get("rubric", default)
        if rubric is None:
            raise ConfigError(f"input 'rubric_contrast' reads each example's 'rubric' column; the example with "
                              f"prompt {example.prompt!r:.80} has none (columns: {sorted(example.columns)}): use a "
                              f"task whose rows carry a rubric (a jsonl or hf_dataset task with a 'rubric' field) "
                              f"or set the credit's default_rubric")
        prompts.append(reprompt(example, template, rubric=str(rubric)))
    with_rubric = score(ctx.policy, rollouts, torch.arange(batch.batch_size), prompts, ctx.temperature, full=False)
    plain = ctx.policy.forward_logp(batch.prompt_ids, batch.prompt_mask, batch.response_ids, batch.response_mask,
                                    temperature=ctx.temperature)
    return {"rubric_contrast": (with_rubric["logp"].to(plain["logp"].device) - plain["logp"]) * batch.mask}
