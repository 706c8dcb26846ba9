"""The trainable model roles (critics, the implicit PRM): their optimizers, the backward of each role's own loss
(``Role.loss``) on each micro-batch, their optimizer step, the warm-up during which only they learn, and their
checkpointed state."""
from __future__ import annotations

import math

import torch

from polo.core.aggregation import Aggregation, StepCounts
from polo.dist.fsdp import clip_grad_norm


class Critics:
    """``members``: ``(name, role, model)`` of each trainable role; each gets its own AdamW at the role's lr."""

    def __init__(self, members: list[tuple[str, object, torch.nn.Module]], grad_clip: float | None):
        self.members = [(name, role, model, torch.optim.AdamW(model.parameters(), lr=role.lr))
                        for name, role, model in members]
        self.grad_clip = grad_clip or math.inf

    def __bool__(self) -> bool:
        return bool(self.members)

    def policy_frozen(self, step: int) -> bool:
        """True during the warm-up: ``step`` (completed steps) below some critic's ``warmup_steps``."""
        return any(step < role.warmup_steps for _, role, _, _ in self.members)

    def backward(self, micro, counts: StepCounts, aggregation: Aggregation, weight: float = 1.0) -> dict[str, float]:
        """Each role's ``loss`` on the micro-batch (a critic's: the clipped value loss against ``micro.returns``),
        backpropagated with ``weight``; logged as ``loss/NAME`` and the role's diagnostics as ``NAME/KEY``."""
        stats = {}
        for name, role, model, _ in self.members:
            loss, diagnostics = role.loss(model, micro, counts, aggregation)
            (loss * weight).backward()
            stats[f"loss/{name}"] = float(loss.detach())
            stats.update({f"{name}/{key}": value for key, value in diagnostics.items()})
        return stats

    def parameters(self) -> list[torch.nn.Parameter]:
        """Every critic's parameters (a data-parallel learner sums their gradients over ranks before ``step``)."""
        return [p for _, _, model, _ in self.members for p in model.parameters()]

    def step(self) -> int:
        """One optimizer step per critic; a critic whose gradient is not finite skips it. Returns the skips."""
        skipped = 0
        for _, _, model, optimizer in self.members:
            if math.isfinite(clip_grad_norm(list(model.parameters()), self.grad_clip)):
                optimizer.step()
            else:
                skipped += 1
            optimizer.zero_grad(set_to_none=True)
        return skipped

    def state_dict(self) -> dict[str, dict]:
        return {name: optimizer.state_dict() for name, optimizer in self.optimizers().items()}

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {name: optimizer for name, _, _, optimizer in self.members}

    def load_optimizers(self, state: dict[str, dict]) -> None:
        """The optimizer states of ``state`` (those of sharded critics are restored with their shards)."""
        for name, optimizer in self.optimizers().items():
            if name in state:
                optimizer.load_state_dict(state[name])
