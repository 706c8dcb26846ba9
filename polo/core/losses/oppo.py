"""OPPO: offline preference-guided policy optimization, its context-space objective for language models.

OPPO encodes a whole trajectory into a context z, trains the policy to reproduce trajectories from their own
context (hindsight information matching) and places a learnable optimal context z* near the contexts of
preferred trajectories and away from the others with a triplet loss. With ``d(a, b) = ‖a − b + 10⁻⁶‖₂``:

- ``L_pref(z*, z⁺, z⁻) = mean_pairs max(d(z*, z⁺) − d(z*, z⁻) + m, 0)``,
- ``L_norm = mean (‖z⁺‖ − 1)² + mean (‖z⁻‖ − 1)²`` (contexts kept near the unit sphere),
- step 1, encoder and policy with z* held fixed: ``L_rec + c_pref·L_pref(sg(z*), z⁺, z⁻) + c_norm·L_norm``,
- step 2, z* alone with the contexts held fixed: ``L_pref(z*, sg(z⁺), sg(z⁻))``.
"""
from __future__ import annotations

from typing import Any, ClassVar

import torch
from pydantic import Field, PrivateAttr
from torch import Tensor, nn

from polo.core.batch import RolloutBatch
from polo.core.losses.base import LossOutput, PolicyLoss
from polo.core.losses.preference import Pairs, sequence_mean
from polo.core.registry import POLICY_LOSSES

DISTANCE_EPS = 1e-6


def context_distance(a: Tensor, b: Tensor) -> Tensor:
    """``‖a − b + 10⁻⁶‖₂`` over the last dimension (the pairwise distance of the triplet loss)."""
    return torch.linalg.vector_norm(a - b + DISTANCE_EPS, dim=-1)


def triplet(anchor: Tensor, positive: Tensor, negative: Tensor, margin: float) -> Tensor:
    """``max(d(anchor, z⁺) − d(anchor, z⁻) + m, 0)`` per row (``anchor`` broadcasts against the rows)."""
    return (context_distance(anchor, positive) - context_distance(anchor, negative) + margin).clamp_min(0)


def norm_penalty(z: Tensor) -> Tensor:
    """``(‖z‖₂ − 1)²`` per row."""
    return (torch.linalg.vector_norm(z, dim=-1) - 1) ** 2


def oppo_terms(z_star: Tensor, positive: Tensor, negative: Tensor, margin: float) -> tuple[Tensor, Tensor]:
    """The two triplet terms per pair: step 1's ``L_pref(sg(z*), z⁺, z⁻)`` (gradient to the contexts only) and
    step 2's ``L_pref(z*, sg(z⁺), sg(z⁻))`` (gradient to z* only)."""
    return (triplet(z_star.detach(), positive, negative, margin),
            triplet(z_star, positive.detach(), negative.detach(), margin))


@POLICY_LOSSES.register("oppo")
class OPPO(PolicyLoss):
    """OPPO for language models, on (chosen, rejected) pairs (engine ``preference_pairs``): the context of a
    response is ``z = W·h̄ + b``, ``h̄`` the mean of the policy's last hidden states over its tokens (the encoder is
    the policy's own trunk plus this linear head, d → ``context_dim``); hindsight information matching is the
    token NLL of the chosen response, ``L_rec = mean_pairs mean_t −log π(y_w,t)``. Per pair, with z⁺ = z(y_w),
    z⁻ = z(y_l): ``loss = L_rec + c_pref·L_pref(sg(z*), z⁺, z⁻) + c_norm·[(‖z⁺‖−1)² + (‖z⁻‖−1)²]`` (step 1, the
    value returned), and the same backward also carries step 2's ``L_pref(z*, sg(z⁺), sg(z⁻))`` into z* alone.

    The trunk is trained by the run's optimizer (clip it with ``optim.grad_clip``: 0.25 in OPPO); the head and z*
    belong to this component, which gives them one Adam step (``lr``; the head's gradient clipped at ``grad_clip``)
    per training step in ``after_update``, on the gradient of that step's minibatches, and checkpoints them.

    Not reproduced: OPPO's policy is conditioned on the context (z* steers it at test time); polo's policy is a
    plain LM, so z* is learnt and reported (``z_star_norm``, the distances) but does not condition generation.
    The head and z* are created on the first call (their size then known) from ``seed``; a data-parallel learner
    would not all-reduce their gradients (one learner only).
    """

    paper = "Beyond Reward: Offline Preference-guided Policy Optimization (arXiv:2305.16217)"
    provenance = "CODE"
    whole_groups: ClassVar[bool] = True
    group_size: ClassVar[int | None] = 2
    requires = frozenset({"chosen"})
    training_hidden_layer: ClassVar[int | None] = -1

    margin: float = Field(1.0, ge=0)
    """m: the triplet margin."""
    pref_coef: float = Field(0.1, ge=0)
    """c_pref: weight of the triplet term in step 1 (OPPO's pref_loss_ratio)."""
    norm_coef: float = Field(0.1, ge=0)
    """c_norm: weight of the unit-norm penalty on the contexts (OPPO's phi_norm_loss_ratio)."""
    context_dim: int = Field(16, ge=1)
    """Size of the contexts z and of z*."""
    lr: float = Field(1e-3, gt=0)
    """Adam learning rate of the context head and z*."""
    grad_clip: float = Field(0.25, gt=0)
    """Gradient-norm clip of the context head (part of the encoder)."""
    seed: int = 0
    """Seeds the initial head (uniform ±1/√d, as nn.Linear) and z* (normal, variance 1/context_dim)."""

    _head: nn.Linear | None = PrivateAttr(default=None)
    _z_star: nn.Parameter | None = PrivateAttr(default=None)
    _optimizer: torch.optim.Optimizer | None = PrivateAttr(default=None)

    def _build(self, hidden_size: int) -> None:
        """The head ``[context_dim, hidden_size]``, z* and their optimizer."""
        g = torch.Generator().manual_seed(self.seed)
        bound = hidden_size ** -0.5
        self._head = nn.Linear(hidden_size, self.context_dim)
        with torch.no_grad():
            self._head.weight.copy_((torch.rand(self.context_dim, hidden_size, generator=g) * 2 - 1) * bound)
            self._head.bias.copy_((torch.rand(self.context_dim, generator=g) * 2 - 1) * bound)
        self._z_star = nn.Parameter(torch.randn(self.context_dim, generator=g) / self.context_dim ** 0.5)
        self._optimizer = torch.optim.Adam([*self._head.parameters(), self._z_star], lr=self.lr)

    def contexts(self, hidden: Tensor, batch: RolloutBatch) -> Tensor:
        """``[B, context_dim]``: the head applied to each response's mean last hidden state."""
        if self._head is None:
            self._build(hidden.shape[-1])
        mask = batch.mask
        response = hidden[:, -mask.shape[1]:]
        pooled = (response * mask[..., None]).sum(1) / mask.sum(1, keepdim=True).clamp_min(1)
        return self._head(pooled.to(self._head.weight.dtype))

    def __call__(self, logp: Tensor, batch: RolloutBatch, hidden: Tensor | None = None) -> LossOutput:
        if hidden is None:
            raise ValueError("policy_loss oppo reads the policy's last hidden states with gradient: call it as "
                             "oppo(logp, batch, hidden=policy.forward_logp(..., hidden_layer=-1)['hidden_states'])")
        mask = batch.mask
        pairs = Pairs.of(batch, "oppo")
        z = self.contexts(hidden, batch).to(logp.dtype)
        z_pos, z_neg = pairs.side(z, chosen=True), pairs.side(z, chosen=False)
        encoder_pref, anchor_pref = oppo_terms(self._z_star.to(z), z_pos, z_neg, self.margin)
        rec = pairs.side(sequence_mean(-logp, mask), chosen=True)
        norm = pairs.side(norm_penalty(z), True) + pairs.side(norm_penalty(z), False)
        step1 = torch.where(pairs.valid, rec + self.pref_coef * encoder_pref + self.norm_coef * norm, 0.0)
        step2 = torch.where(pairs.valid, anchor_pref, 0.0)
        P = max(pairs.P, 1)
        loss = step1.sum() / P + (step2.sum() - step2.sum().detach()) / P  # the value is step 1's
        with torch.no_grad():
            token_loss = (step1[pairs.inv] / 2)[:, None] * mask / mask.sum(-1, keepdim=True).clamp_min(1)
            star = self._z_star.detach().to(z)
            metrics = {
                "rec_nll": pairs.mean(rec.detach()),
                "pref_loss": pairs.mean(encoder_pref.detach()),
                "norm_loss": pairs.mean(norm.detach()),
                "dist_chosen": pairs.mean(context_distance(star, z_pos.detach())),
                "dist_rejected": pairs.mean(context_distance(star, z_neg.detach())),
                "z_star_norm": star.norm(),
                "pairs_used": pairs.valid.to(z).mean() if pairs.P else torch.zeros(()),
            }
        return LossOutput(token_loss, metrics, loss=loss)

    def after_update(self, batch, context) -> dict[str, float]:
        """Step 2 (and the head's share of step 1): one Adam step on the gradient the step's backwards left."""
        if self._optimizer is None or self._z_star.grad is None:
            return {}
        torch.nn.utils.clip_grad_norm_(self._head.parameters(), self.grad_clip)
        self._optimizer.step()
        self._optimizer.zero_grad(set_to_none=True)
        return {"oppo/z_star_norm": float(self._z_star.detach().norm())}

    def state_dict(self) -> dict[str, Any]:
        if self._head is None:
            return {}
        return {"head": {k: v.detach().clone() for k, v in self._head.state_dict().items()},
                "z_star": self._z_star.detach().clone(), "optimizer": self._optimizer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if not state:
            return
        self._build(state["head"]["weight"].shape[1])
        self._head.load_state_dict(state["head"])
        with torch.no_grad():
            self._z_star.copy_(state["z_star"])
        self._optimizer.load_state_dict(state["optimizer"])
