"""The per-turn judge: ``turn_judge`` ``[N]`` (and ``turn_judge_scores`` ``[N, D]``, ``turn_judge_present``
``[N]``) on multi-turn step rows, from the ``judge`` role.

The model-based source of a per-turn process score, where an environment has no oracle for it (MAPO's judge,
arXiv:2603.06194, scores each dialogue turn with a judge model). Each step row is one turn; the judge reads it
as an example whose ``{prompt}`` is the context the policy acted in and whose ``{response}`` is the turn as the
next context shows it, ``<action>;<observation>`` (the action and what the environment answered), with
``{answer}`` the environment's gold answer where it has one (else empty) and ``{rubric}`` empty. So
``roles: {judge: {backend: http, template: "...{prompt}...{response}... Did this turn help? yes or no"}}``
scores every turn with one batched call per step; the causal and classifier back ends read the same text.
``turn_judge`` is the mean of a row's D criteria, NaN where a judgment failed (``turn_judge_present`` is then
0); the step's metrics get ``turn_judge/failures``, ``turn_judge/failure_rate`` and
``turn_judge/failures_<reason>``.
"""
from __future__ import annotations

import torch
from torch import Tensor

from polo.envs.render import ACTION_SEP
from polo.inputs.base import ProviderContext, register_provider
from polo.inputs.judge_inputs import judged
from polo.tasks.base import Example


def turn_examples(records) -> tuple[list[Example], list[str]]:
    """The judge's (example, completion) of each turn record: (context, gold) and ``<action>;<observation>``."""
    examples = [Example(r.context_text, r.gold or "") for r in records]
    return examples, [f"{r.action}{ACTION_SEP}{r.observation}" for r in records]


@register_provider("turn_judge", "turn_judge_scores", "turn_judge_present", roles={"judge"})
@torch.no_grad()
def turn_judge(ctx: ProviderContext, rollouts) -> dict[str, Tensor]:
    """The judge's scores of every turn of the batch (see the module docstring)."""
    if rollouts.turns is None:
        raise ValueError("input 'turn_judge' scores the turns of multi-turn step rows: use engine: "
                         "{name: multi_turn}")
    scores = judged(ctx, *turn_examples(rollouts.turns), prefix="turn_judge").float().cpu()
    got = {"turn_judge": scores.mean(-1), "turn_judge_present": scores.isfinite().all(-1).float()}
    if "turn_judge_scores" in ctx.needs:
        got["turn_judge_scores"] = scores
    return got
