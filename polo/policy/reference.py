"""Frozen reference policy for KL / ref_logp terms."""
from __future__ import annotations

import copy


def frozen_copy(policy):
    """A deep copy of ``policy`` in eval mode with gradients off."""
    ref = copy.deepcopy(policy).eval()
    ref.requires_grad_(False)
    return ref
