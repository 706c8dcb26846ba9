"""Frozen policies: the reference for KL / ref_logp terms, and second models read from a folder (teachers, judges)."""
from __future__ import annotations

import copy

from polo.policy.policy import Policy


def frozen_copy(policy):
    """A deep copy of ``policy`` in eval mode with gradients off."""
    ref = copy.deepcopy(policy).eval()
    ref.requires_grad_(False)
    return ref


def frozen_load(folder, like: Policy, chat_template: bool) -> Policy:
    """The checkpoint ``folder`` as a Policy on ``like``'s device and compute dtype, in eval mode with gradients
    off (a teacher or a judge beside the trained policy)."""
    return Policy.load(folder, device=like.device, chat_template=chat_template,
                       compute_dtype=like.compute_dtype).eval().requires_grad_(False)
