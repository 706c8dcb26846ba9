"""The judge's inputs: ``judge_score`` ``[B]`` and ``judge_scores`` ``[B, D]`` from the ``judge`` role.

One call of the judge per step scores every (example, completion) on each of its D criteria. A failed
judgment (timeout, connection or HTTP error, unparseable reply, too long for a local judge) is NaN, so a
component can tell "unscored" from a low score; ``judge_present`` ``[B]`` is 0 where any criterion of a row
failed. ``judge_score`` is the mean of a row's D criteria. The step's metrics row gets ``judge/failures``
(failed judgments), ``judge/failure_rate`` (over B·D judgments) and ``judge/failures_<reason>`` per reason,
and failures are logged (``logging``, logger ``polo.inputs.judge_inputs``) with one example per reason.
"""
from __future__ import annotations

import logging

import torch
from torch import Tensor

from polo.core.model_prompts import ModelPrompts, PromptQuery
from polo.core.templates import render
from polo.engines.base import Rollouts
from polo.inputs.base import ProviderContext, register_provider

log = logging.getLogger(__name__)


def judge_context(query: PromptQuery) -> list[ModelPrompts]:
    """The causal judge's text of each criterion (filled with a response of at most ``max_new`` tokens) followed by
    its longer verdict, when the judge is a frozen copy of the policy; other back ends read no text with the
    policy's context (an own ``path`` is loaded later, and its too-long texts fail as ``too_long``)."""
    judge = query.roles["judge"]
    if judge.backend != "causal" or judge.path is not None:
        return []
    verdict = max(query.tokens(v) for v in judge.verdicts)
    where = "roles.judge.criteria" if judge.criteria else "roles.judge.template"
    return [ModelPrompts("roles.judge", f"the text of criterion {name!r}", where, "shorten the template",
                         [render(template, e, "") for e in query.examples],
                         [(query.max_new, "response tokens"), (verdict, "verdict tokens (roles.judge.verdicts)")])
            for name, template in judge.named_templates()]


def judged(ctx: ProviderContext, examples, completions, prefix: str = "judge") -> Tensor:
    """``[B, D]``: the ``judge`` role's scores of ``completions`` (NaN where a judgment failed), with the failure
    metrics ``<prefix>/failures``, ``<prefix>/failure_rate`` and ``<prefix>/failures_<reason>`` in ``ctx.metrics``
    and one log line with an example per reason when any failed."""
    judgments = ctx.models["judge"](examples, completions)
    scores = judgments.scores
    failed = sum(judgments.failures.values())
    ctx.metrics[f"{prefix}/failures"] = float(failed)
    ctx.metrics[f"{prefix}/failure_rate"] = failed / max(scores.numel(), 1)
    for reason, count in sorted(judgments.failures.items()):
        ctx.metrics[f"{prefix}/failures_{reason}"] = float(count)
    if failed:
        log.warning("%s: %d of %d judgments failed (%s); e.g. %s", prefix, failed, scores.numel(),
                    ", ".join(f"{r}: {n}" for r, n in sorted(judgments.failures.items())),
                    "; ".join(f"{r}: {d}" for r, d in sorted(judgments.details.items())))
    return scores


@register_provider("judge_score", "judge_scores", "judge_present", roles={"judge"}, prompts=judge_context)
@torch.no_grad()
def judge_inputs(ctx: ProviderContext, rollouts: Rollouts) -> dict[str, Tensor]:
    """The judge's scores of the batch's completions (see the module docstring)."""
    scores = judged(ctx, rollouts.examples, rollouts.completions).to(rollouts.batch.rewards.device)
    got = {"judge_present": scores.isfinite().all(-1).float()}
    if "judge_score" in ctx.needs:
        got["judge_score"] = scores.mean(-1)
    if "judge_scores" in ctx.needs:
        got["judge_scores"] = scores
    return got
