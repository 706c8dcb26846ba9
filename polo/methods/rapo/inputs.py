"""Inputs of score-prediction rewards (RAPO, arXiv:2509.21871), read from the completions and examples.

* ``predicted_score`` ``[B]``: the number a completion states, read from its ``<answer>…</answer>`` block (or
  the whole completion when it has none) as one decimal number; NaN when it states none (``"0.7"`` → 0.7,
  ``"<think>…</think><answer>.25</answer>"`` → 0.25, ``"about 0.7"`` → NaN).
* ``true_score`` ``[B]``: the example's ground-truth score, its column ``score`` (a finite number).
"""
from __future__ import annotations

import math

import torch
from torch import Tensor

from polo.engines.base import Rollouts
from polo.inputs.base import ProviderContext, register_provider
from polo.tasks.think_answer import answer_text, as_number

SCORE_COLUMN = "score"


@register_provider("predicted_score", "true_score")
def score_inputs(ctx: ProviderContext, rollouts: Rollouts) -> dict[str, Tensor]:
    """``predicted_score`` and ``true_score`` (see the module docstring)."""
    dtype = rollouts.batch.rewards.dtype
    got = {}
    if "predicted_score" in ctx.needs:
        values = [as_number(answer_text(t)) for t in rollouts.completions]
        got["predicted_score"] = torch.tensor([math.nan if v is None else v for v in values], dtype=dtype)
    if "true_score" in ctx.needs:
        truth = []
        for example in rollouts.examples:
            value = example.columns.get(SCORE_COLUMN)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"input 'true_score' reads the example column {SCORE_COLUMN!r} as a finite number; "
                                 f"the example with prompt {example.prompt!r:.80} has {SCORE_COLUMN}={value!r}")
            truth.append(float(value))
        got["true_score"] = torch.tensor(truth, dtype=dtype)
    return got
