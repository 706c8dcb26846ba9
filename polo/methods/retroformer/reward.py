"""Retroformer's reflection reward: how much the next trial's return improved.

"Retroformer: Retrospective Large Language Agents with Policy Gradient Optimization" (arXiv:2308.02151). A frozen
actor attempts task x; after a failed trial k with return G_k a retrospective model writes a reflection y_k,
which joins the actor's prompt for trial k + 1. The reflection is rated by the return difference

    r(y_k) = G_{k+1} − G_k,

so a reflection that turns a failure (G_k = 0) into a success (G_{k+1} = 1) earns 1, and one that leaves the
actor where it was earns 0. polo's default baseline is group-relative: A = r − mean r over the reflections
written for the same task and trial index (advantage ``grpo`` with ``scale_by_std: false``).
"""
from __future__ import annotations

import torch
from torch import Tensor


def reflection_rewards(before: Tensor, after: Tensor) -> Tensor:
    """``after − before`` elementwise: ``before`` ``[B]`` the returns G_k of the reflected trials, ``after`` ``[B]``
    the returns G_{k+1} of the trials that read each reflection. Different shapes or a non-finite return raise
    ValueError."""
    if before.shape != after.shape:
        raise ValueError(f"reflection_rewards: returns before {tuple(before.shape)} and after "
                         f"{tuple(after.shape)} must have the same shape (one pair per reflection)")
    if not (torch.isfinite(before).all() and torch.isfinite(after).all()):
        raise ValueError("reflection_rewards: a trial return is NaN or infinite; expected finite episode returns")
    return after - before
