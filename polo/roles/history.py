"""The ``history`` role: frozen past iterates of the policy, the opponents of MNPO and INPO.

Iterative Nash methods train iteration t+1 against the policy as it was at the start of iteration t (INPO)
or against several earlier iterates (MNPO). The role holds ``size`` frozen copies, most recent first, and
every ``iteration_steps`` training steps pushes the current policy in front (the oldest drops out). A slot not
filled yet holds the policy as training started, i.e. the reference model: before iteration t the iterates
π_{t−1}, π_{t−2}, ... that do not exist are π_0. The copies are checkpointed with the run.
"""
from __future__ import annotations

import torch
from pydantic import Field
from torch import nn

from polo.policy.policy import Policy
from polo.policy.reference import frozen_copy
from polo.roles.base import ROLES, Role


class PolicyHistory(nn.Module):
    """``size`` frozen copies of a policy, ``snapshots[0]`` the most recent; ``filled`` counts the pushed ones."""

    def __init__(self, policy: Policy, size: int):
        super().__init__()
        self.snapshots = nn.ModuleList(frozen_copy(policy) for _ in range(size))
        self.register_buffer("filled", torch.zeros((), dtype=torch.long))

    @torch.no_grad()
    def push(self, policy: Policy) -> None:
        """Copy ``policy``'s weights into the oldest slot and move it to the front."""
        *recent, oldest = self.snapshots
        oldest.load_state_dict(policy.state_dict())
        self.snapshots = nn.ModuleList([oldest, *recent])
        self.filled.fill_(min(int(self.filled) + 1, len(self.snapshots)))


@ROLES.register("history")
class History(Role):
    """MNPO/INPO's opponents: ``size`` frozen past iterates of the policy, the current policy pushed in front
    every ``iteration_steps`` steps (slots not filled yet hold the initial policy, which is the reference).
    "Multiplayer Nash Preference Optimization" (arXiv:2509.23102)."""

    size: int = Field(2, ge=1)
    """H: how many past iterates are kept (MNPO's max_history_t; INPO: 1)."""
    iteration_steps: int = Field(100, ge=1)
    """Training steps per iteration: the policy is pushed into the history after every this many steps."""

    def build(self, policy: Policy) -> nn.Module:
        return PolicyHistory(policy, self.size)

    def on_update(self, model: nn.Module, policy: Policy, step: int) -> None:
        if step % self.iteration_steps == 0:
            model.push(policy)
