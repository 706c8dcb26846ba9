"""Clipped critic loss (PPO's value loss as verl and OpenRLHF implement it)."""
from __future__ import annotations

import torch
from torch import Tensor


def clipped_value_loss(values: Tensor, old_values: Tensor, returns: Tensor, clip: float | None) -> Tensor:
    """``0.5·max((v − R)², (v_clip − R)²)`` per token, ``v_clip = clamp(v, v_old − clip, v_old + clip)``;
    ``0.5·(v − R)²`` when ``clip`` is None. Aggregate with a mask like any token loss."""
    loss = (values - returns) ** 2
    if clip is not None:
        v_clip = old_values + (values - old_values).clamp(-clip, clip)
        loss = torch.maximum(loss, (v_clip - returns) ** 2)
    return 0.5 * loss
