"""The element inputs of P2TPO: each completion's generated blocks aligned to the reference elements.

The task aligns and scores: ``element_report(completion, example) -> ElementReport`` (polo.tasks.spans: per
reference element its quality, the character span of the aligned block or None, the error characters inside
blocks, and for a missing element the character where it should have started; task ``fields`` aligns
``key=value`` blocks by key). The provider maps characters to response tokens (``span_inputs.completion_offsets``,
exact for a character tokenizer and a BPE) and writes, with E the most elements of any row:

* ``element_quality`` ``[N, E]`` float: quality of each element, NaN past the row's own elements,
* ``element_span`` ``[N, E, 2]`` long: response columns ``[start, end)`` of the aligned block (0, 0 if missing),
* ``element_label`` ``[N, T]`` long: 1 on a block token whose characters are all correct, 0 on a block token
  holding an error character, −1 outside every block,
* ``element_boundary`` ``[N, E]`` long: for a missing element the column of the token holding the character
  where it should have started (the row's last token, its EOS, when that is the end of the text); −1 otherwise.

A row whose completion is not found in its decoded tokens keeps its qualities and gets no blocks, labels or
boundaries (metric ``elements/unmapped_rows``).
"""
from __future__ import annotations

import bisect
import math

import torch
from torch import Tensor

from polo.inputs.char_spans import token_columns
from polo.engines.base import Rollouts
from polo.inputs.base import ProviderContext, register_provider
from polo.inputs.span_inputs import completion_offsets, task_method

NAMES = ("element_quality", "element_span", "element_label", "element_boundary")


@register_provider(*NAMES)
def element_inputs(ctx: ProviderContext, rollouts: Rollouts) -> dict[str, Tensor]:
    """``element_quality``, ``element_span``, ``element_label``, ``element_boundary`` from the task's
    ``element_report`` (module docstring)."""
    report = task_method(ctx.task, "element_report", "element_quality")
    batch = rollouts.batch
    N, T = batch.response_ids.shape
    reports = [report(c, e) for c, e in zip(rollouts.completions, rollouts.examples)]
    E = max((len(r.quality) for r in reports), default=0)
    quality = torch.full((N, E), math.nan)
    span = torch.zeros(N, E, 2, dtype=torch.long)
    label = torch.full((N, T), -1, dtype=torch.long)
    boundary = torch.full((N, E), -1, dtype=torch.long)
    unmapped = 0
    for row, (got, offsets) in enumerate(zip(reports, completion_offsets(ctx.policy.tokenizer, rollouts))):
        quality[row, : len(got.quality)] = torch.tensor(got.quality, dtype=torch.float32)
        if offsets is None:
            unmapped += 1
            continue
        lead, ends = offsets
        for e, block in enumerate(got.blocks):
            if block is not None:
                start, end = token_columns(ends, lead + block[0], lead + block[1])
                span[row, e] = torch.tensor([start, end])
                label[row, start:end] = 1
            elif got.boundary[e] is not None and ends:
                boundary[row, e] = min(bisect.bisect_right(ends, lead + got.boundary[e]), len(ends) - 1)
        for c in got.errors:
            label[row, min(bisect.bisect_right(ends, lead + c), len(ends) - 1)] = 0
    ctx.metrics["elements/unmapped_rows"] = float(unmapped)
    device = batch.rewards.device
    return {"element_quality": quality.to(device), "element_span": span.to(device),
            "element_label": label.to(device), "element_boundary": boundary.to(device)}
