"""The contract of a control policy and the registry of their settings."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from polo.core.registry import Component, Registry

CONTROL_POLICIES: Registry = Registry("control policy", ("polo.control.policies",), default="gaussian")


@dataclass
class ActionScore:
    """A policy's verdict on stored actions: ``logp`` ``[B]`` under the current parameters, ``entropy`` ``[B]``,
    ``aux_loss`` (a scalar the policy adds to the objective, e.g. PolicyFlow's Brownian regulariser; None: none),
    ``kl`` and diagnostics."""

    logp: Tensor
    entropy: Tensor
    aux_loss: Tensor | None = None
    kl: Tensor | None = None
    """``[B]`` KL(π_old ‖ π_new) when the policy computes it exactly (the KL-adaptive learning rate reads it);
    None: the trainer estimates it from the ratio, ``mean((ρ − 1) − log ρ)``."""
    metrics: dict[str, float] = field(default_factory=dict)


class ControlPolicy(nn.Module):
    """``act(obs)`` → a record of ``[B, ...]`` tensors: ``action`` (what the environment receives), ``logp``
    (its log-probability under the acting parameters) and whatever else ``evaluate`` needs to score the same
    action again (a flow policy's noise and ODE output); every entry is stored per step by the engine.
    ``evaluate(obs, record)`` scores a stored record under the current parameters. ``end_update()`` runs after
    each update (a policy that keeps a copy of its previous parameters refreshes it there)."""

    def act(self, obs: Tensor, generator: torch.Generator | None = None, deterministic: bool = False
            ) -> dict[str, Tensor]:
        raise NotImplementedError

    def evaluate(self, obs: Tensor, record: dict[str, Tensor]) -> ActionScore:
        raise NotImplementedError

    def end_update(self) -> None:
        """Called after every update; nothing by default."""


class ControlPolicySettings(Component):
    """Registered settings of a control policy; ``build`` makes the module for an environment's spaces."""

    def build(self, observation_space: Any, action_space: Any) -> ControlPolicy:
        raise NotImplementedError
