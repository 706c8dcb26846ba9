"""The ``answer_rewards`` input: each completion read as a set of answers, every answer scored by every reward
component of the run (the per-answer reward vectors of VPO's answer sets)."""
from __future__ import annotations

import math

import torch
from torch import Tensor

from polo.engines.base import Rollouts
from polo.inputs.base import ProviderContext, component_setting, register_provider
from polo.tasks.reward_calls import RewardContext
from polo.tasks.rewards import score_batch


def split_answers(completion: str, separator: str, limit: int, marker: str | None = None) -> list[str]:
    """Up to ``limit`` answers of ``completion``: the text after the first ``marker`` (all of it when there is no
    marker or it is absent) split on ``separator``, pieces stripped, empty ones skipped. With a marker each
    answer keeps the shared reasoning before it (``reasoning + marker + piece``), so a reward that reads the
    answer after the marker scores it as it would a whole completion."""
    head, found, tail = completion.partition(marker) if marker else ("", "", completion)
    if not found:
        head, tail = "", completion
    pieces = (p.strip() for p in tail.split(separator))
    return [head + found + p for p in pieces if p][:limit]


@register_provider("answer_rewards")
def answer_rewards(ctx: ProviderContext, rollouts: Rollouts) -> dict[str, Tensor]:
    """``answer_rewards`` ``[B, M, D]``: the rewards of up to M answers per completion (M = the components'
    ``answers`` field, split on their ``separator``: ``split_answers``), scored as completions of the row's
    example by the run's D reward components (the engine's reward specs, through its scorer); NaN for a missing
    answer and where a reward returned None. Shaping terms are not part of the vector, and what the rewards
    report with ``log_metric`` while scoring answers is not logged."""
    components = ctx.components.values()
    limit = component_setting(components, "answers", None)
    separator = component_setting(components, "separator", None)
    if limit is None or separator is None:
        raise ValueError("input answer_rewards: no component sets 'answers' and 'separator' (e.g. advantage vpo)")
    setup = ctx.engine.settings
    batch = rollouts.batch
    sets = [split_answers(c, separator, limit, ctx.task.answer_marker) for c in rollouts.completions]
    rows = [i for i, answers in enumerate(sets) for _ in answers]
    slots = [j for answers in sets for j in range(len(answers))]
    texts = [a for answers in sets for a in answers]
    out = torch.full((batch.batch_size, limit, len(setup.reward_specs)), math.nan)
    if texts:
        ids = [ctx.policy.tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
        scores = (setup.scorer or score_batch)(ctx.task, setup.reward_specs, [rollouts.examples[i] for i in rows],
                                               texts, ids, RewardContext(state=setup.reward_context.state))
        out[rows, slots] = scores.values.masked_fill(~scores.present, math.nan)
    return {"answer_rewards": out.to(batch.rewards.device)}
