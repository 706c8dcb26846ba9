"""The ``span_tag`` and ``span_rewards`` inputs: each completion cut into tagged phases with a reward each.

The task knows its tags: it has ``span_tags`` (the S tag names) and ``tagged_spans(completion, example) ->
TaggedSpans`` (polo.tasks.spans: character spans ``(tag, start, end)`` and one score per tag; task
``slate_rank`` cuts ``S:…|R:…`` into its slate and rank phases, scored by recall and NDCG@k). The provider
writes

* ``span_tag`` ``[N, T]`` long: the tag of each response token, −1 outside every span (padding, EOS, a row
  whose text could not be found in its tokens),
* ``span_rewards`` ``[N, S]`` float: the tags' scores.

Character spans become token columns through the policy's tokenizer as for DiDPO's sub-diffs
(``polo.inputs.char_spans.char_ends``: the tokens decoded one by one, or as growing prefixes when the pieces
do not add up to the text, so a character tokenizer and a byte-level BPE both map exactly). A token covers
every character it decodes to; a token whose characters meet several spans takes the last of them in text
order, so a token that holds a tag opener belongs to the phase it opens. Special tokens (EOS) decode to no
character and so belong to no span.
"""
from __future__ import annotations

import torch
from torch import Tensor

from polo.core.registry import ConfigError
from polo.inputs.char_spans import char_ends, token_columns
from polo.engines.base import Rollouts
from polo.inputs.base import ProviderContext, register_provider


def completion_offsets(tokenizer, rollouts: Rollouts) -> list[tuple[int, list[int]] | None]:
    """Per row ``(lead, ends)``: the completion starts at character ``lead`` of the decoded response tokens and
    ``ends[t]`` is the end of token t's characters (``char_ends``); None when the completion is not found there."""
    batch = rollouts.batch
    mask = batch.response_mask
    last = torch.where(mask.bool(), torch.arange(mask.shape[1], device=mask.device), -1).amax(1).tolist() \
        if mask.numel() else [-1] * batch.batch_size
    out: list[tuple[int, list[int]] | None] = []
    for ids, end, completion in zip(batch.response_ids.tolist(), last, rollouts.completions):
        text, ends = char_ends(tokenizer, ids[: end + 1])
        lead = text.find(completion)
        out.append(None if lead < 0 else (lead, ends))
    return out


def task_method(task, method: str, what: str):
    """The task's ``method``; ConfigError naming the input ``what`` when the task has none."""
    fn = getattr(task, method, None)
    if not callable(fn):
        raise ConfigError(f"input {what!r} needs a task with a {method}(completion, example) method (task "
                          f"'slate_rank' or 'fields' has one); task {getattr(task, 'name', task)!r} has none")
    return fn


@register_provider("span_tag", "span_rewards")
def tagged_spans(ctx: ProviderContext, rollouts: Rollouts) -> dict[str, Tensor]:
    """``span_tag`` ``[N, T]`` (tag per token, −1 outside) and ``span_rewards`` ``[N, S]`` from the task's
    ``tagged_spans``; metric ``spans/unmapped_rows`` counts rows whose text was not found in their tokens."""
    parse = task_method(ctx.task, "tagged_spans", "span_tag")
    S = len(ctx.task.span_tags)
    batch = rollouts.batch
    N, T = batch.response_ids.shape
    tag = torch.full((N, T), -1, dtype=torch.long)
    rewards = torch.zeros(N, S)
    unmapped = 0
    for row, (offsets, completion, example) in enumerate(zip(completion_offsets(ctx.policy.tokenizer, rollouts),
                                                             rollouts.completions, rollouts.examples)):
        got = parse(completion, example)
        if len(got.scores) != S:
            raise ValueError(f"task {ctx.task.name!r}: tagged_spans gave {len(got.scores)} scores, expected one per "
                             f"tag of {ctx.task.span_tags}")
        rewards[row] = torch.tensor(got.scores, dtype=torch.float32)
        if offsets is None:
            unmapped += 1
            continue
        lead, ends = offsets
        for s, c0, c1 in sorted(got.spans, key=lambda span: span[1]):
            if not 0 <= s < S:
                raise ValueError(f"task {ctx.task.name!r}: span tag {s} outside 0..{S - 1}")
            start, end = token_columns(ends, lead + c0, lead + c1)
            tag[row, start:end] = s
    ctx.metrics["spans/unmapped_rows"] = float(unmapped)
    device = batch.rewards.device
    return {"span_tag": tag.to(device), "span_rewards": rewards.to(device)}
