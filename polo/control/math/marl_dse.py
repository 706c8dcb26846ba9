"""Design-space exploration as a factored bandit: one agent (one categorical) per architectural knob.

Multi-Agent Reinforcement Learning for Microprocessor Design Space Exploration (arXiv:2211.16385). Each knob i
takes one of ``n_i`` values; the joint space has ``Π n_i`` designs but a factored policy needs only ``Σ n_i``
logits. The reward compares a measured metric ``v`` (latency, power) with its target ``v*``:
``R = min(v* / |v − v*|, cap)`` (the closer, the larger; capped where ``v`` hits the target), and the product of
the two ratios for both targets at once.
"""
from __future__ import annotations

import math
from typing import Literal

import torch
from torch import Tensor


def bin_index(action: Tensor, sizes: list[int]) -> Tensor:
    """The knob values of continuous actions in ``[−1, 1]`` (``[..., len(sizes)]``): knob i cuts ``[−1, 1)`` into
    ``n_i`` equal bins starting at ``−1 + k·2/n_i`` and takes the bin ``a_i`` falls in (numpy's
    ``digitize(a, arange(−1, 1, 2/n)) − 1``); ``a_i = 1`` is the last bin and values outside ``[−1, 1]`` go to the
    nearest end. Returns int64 ``[..., len(sizes)]``."""
    if action.shape[-1] != len(sizes):
        raise ValueError(f"bin_index: the action has {action.shape[-1]} components but there are {len(sizes)} knobs")
    if not torch.isfinite(action).all():
        raise ValueError("bin_index: the action has NaN or infinite components")
    a = action.double()
    out = [torch.bucketize(a[..., i].contiguous(), torch.arange(-1.0, 1.0, 2.0 / n, dtype=torch.float64), right=True)
           .sub(1).clamp(0, n - 1) for i, n in enumerate(sizes)]
    return torch.stack(out, -1)


def target_ratio(value: Tensor, target: float) -> Tensor:
    """``v* / |v − v*|`` (infinite where ``v`` equals the target)."""
    return target / (value - target).abs()


def dse_reward(formulation: Literal["latency", "power", "both"], latency: Tensor, power: Tensor,
               target_latency: float, target_power: float, cap: float = 1000.0) -> Tensor:
    """ArchGym's DRAM reward: ``min(L*/|L − L*|, cap)``, ``min(P*/|P − P*|, cap)`` or
    ``min(P*/|P − P*| · L*/|L − L*|, cap)``."""
    if formulation == "latency":
        r = target_ratio(latency, target_latency)
    elif formulation == "power":
        r = target_ratio(power, target_power)
    elif formulation == "both":
        r = target_ratio(power, target_power) * target_ratio(latency, target_latency)
    else:
        raise ValueError(f"reward formulation {formulation!r}: expected latency, power or both")
    return r.clamp(max=cap)


def joint_space_size(sizes: list[int]) -> int:
    """``Π n_i``: the designs a single agent choosing the whole configuration picks among."""
    return math.prod(sizes)


def logit_count(sizes: list[int]) -> int:
    """``Σ n_i``: the logits of the factored (one agent per knob) policy."""
    return sum(sizes)
