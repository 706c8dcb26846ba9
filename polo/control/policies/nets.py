"""Small multilayer perceptrons with the initialisation PPO implementations use (orthogonal weights, zero biases)."""
from __future__ import annotations

import math
from typing import Sequence

from torch import nn

ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU, "mish": nn.Mish, "silu": nn.SiLU}


def orthogonal_linear(n_in: int, n_out: int, gain: float = math.sqrt(2)) -> nn.Linear:
    """``nn.Linear`` with orthogonal weights of ``gain`` and zero bias ("The 37 Implementation Details of PPO",
    Huang et al., ICLR blog track 2022)."""
    layer = nn.Linear(n_in, n_out)
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


def mlp(n_in: int, hidden: Sequence[int], n_out: int, activation: str = "tanh", out_gain: float = 1.0) -> nn.Sequential:
    """``n_in → hidden… → n_out`` with ``activation`` between layers; hidden layers gain √2, the last ``out_gain``."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation {activation!r}: expected one of {', '.join(ACTIVATIONS)}")
    layers: list[nn.Module] = []
    width = n_in
    for h in hidden:
        layers += [orthogonal_linear(width, h), ACTIVATIONS[activation]()]
        width = h
    layers.append(orthogonal_linear(width, n_out, out_gain))
    return nn.Sequential(*layers)
