"""IAPO: a trajectory's GRPO advantage re-routed over its turns along the influence graph of observations used."""
from __future__ import annotations

from typing import ClassVar, Literal

import torch
from pydantic import Field
from torch import Tensor

from polo.core.advantages.base import AdvantageEstimator, AdvantageResult
from polo.core.advantages.episode_terms import trajectory_advantage
from polo.core.advantages.step_inputs import binary_input, episode_reward, step_input, trajectories
from polo.core.batch import RolloutBatch
from polo.core.registry import ADVANTAGES
from polo.core.segment import segment_sum

MAX_BITS = 63
"""Bits of a non-negative int64 bitmask: turns 0..62 can be referenced."""
INFLUENCE_THRESHOLD = 0.5
"""Default τ of the policy's influence probe, nats per action token (see ``IAPO.influence_threshold``)."""
EDGE_INPUTS = {"oracle": ("uses_support", "uses_failed"), "probe": ("probe_uses_support", "probe_uses_failed")}
"""The step-row inputs holding the support-use and failed-use bitmasks, per ``IAPO.influence`` source."""


def support_reach(tinv: Tensor, step: Tensor, uses_support: Tensor, n_traj: int) -> Tensor:
    """``reach`` of every step row, ``[N]`` bool: the row is its trajectory's last turn, or a chain of
    support-use edges leads from it to the last turn. Row k's bit j of ``uses_support`` is the edge j → k.

    Computed backwards over the turn index (a loop of at most T_max iterations, each vectorized over all
    trajectories): when turn t is reached, every turn whose observation it used is reached too."""
    if not n_traj:
        return torch.zeros_like(step, dtype=torch.bool)
    step = step.long()
    width = int(step.max()) + 1
    last = step.new_full((n_traj,), -1).scatter_reduce(0, tinv, step, "amax")
    reach = torch.zeros(n_traj, width, dtype=torch.bool, device=step.device)
    reach[torch.arange(n_traj, device=step.device), last] = True
    support = torch.zeros(n_traj, width, dtype=torch.long, device=step.device).index_put(
        (tinv, step), uses_support.long())
    bits = torch.arange(min(width, MAX_BITS), device=step.device)
    for t in range(width - 1, 0, -1):
        sources = torch.where(reach[:, t], support[:, t], 0)
        reach[:, : len(bits)] |= ((sources[:, None] >> bits) & 1).bool()
    return reach[tinv, step]


def routing_weights(adv: Tensor, reach: Tensor, fail: Tensor, used_fail: Tensor, tinv: Tensor, n_traj: int,
                    lambda_s: float, lambda_f: float, rho: float) -> Tensor:
    """Routing weights ``w`` of the step rows, ``[N]``, mean 1 over each trajectory.

    ``adv`` is the trajectory advantage on each row (constant per trajectory), the others ``[N]`` bool:
    ``ω = (1 + λ_s·reach)·(ρ if fail else 1)`` where ``adv > 0``, ``ω = 1 + λ_f·(fail + used_fail)`` where
    ``adv < 0``, ``ω = 1`` where ``adv = 0``; ``w = T·ω/Σ_traj ω`` with T the trajectory's number of rows."""
    dtype = adv.dtype
    positive = (1 + lambda_s * reach.to(dtype)) * torch.where(fail, torch.full_like(adv, rho), torch.ones_like(adv))
    negative = 1 + lambda_f * (fail.to(dtype) + used_fail.to(dtype))
    omega = torch.where(adv > 0, positive, torch.where(adv < 0, negative, torch.ones_like(adv)))
    turns = segment_sum(torch.ones_like(omega), tinv, n_traj)
    total = segment_sum(omega, tinv, n_traj)
    return (turns / total)[tinv] * omega


@ADVANTAGES.register("iapo")
class IAPO(AdvantageEstimator):
    """``A_{i,k} = A_i·w_{i,k}``: the trajectory's GRPO advantage redistributed over its turns, total kept.

    ``A_i`` is the z-score of the episode outcome over the trajectories of the task group (``std_u``; a group of
    one trajectory: mean 0, std 1). The rollout's influence graph decides where the credit goes. Row k's
    ``uses_support`` bit j marks an edge j → k (turn k relied on the successful observation of turn j), its
    ``uses_failed`` bit j a failed-use edge (k used or retried the failed observation of turn j), and
    ``tool_error`` marks ``fail_k`` (turn k's own call failed). ``reach_k`` holds for the last turn and for
    every turn with a support-use path to it; ``usedfail_k`` when any failed-use edge enters k.

    * ``A_i > 0``: ``ω_k = (1 + λ_s·reach_k)·(ρ if fail_k else 1)`` (credit follows the supporting chain);
    * ``A_i < 0``: ``ω_k = 1 + λ_f·(fail_k + usedfail_k)`` (blame goes to where errors arose and spread);
    * ``A_i = 0``: ``ω_k = 1``.

    With ``T_i`` turns, ``w_k = T_i·ω_k/Σ_j ω_j`` averages 1, so ``Σ_k A_{i,k} = T_i·A_i``: the trajectory's
    total advantage is only re-routed. Broadcast over each row's action tokens. Reachability is propagated
    backwards over the turn index (a loop of at most T_max vectorized iterations). Bitmasks are int64, so a
    turn can reference turns 0..62; a bit for a turn not earlier than the row's own is refused.

    Paper: "IAPO: Influence-Aware Policy Optimization" for service agents (no arXiv id found). Reconstructed
    from the abstract (a typed influence-dependency graph over the agent's actions, turned into routing weights
    that redistribute the trajectory advantage): the edge encoding, the ω formulas, λ_s, λ_f, ρ and the
    mean-one normalization are our design; so is using the mean of a trajectory's row rewards as its outcome.
    The graph's source is ``influence``: ``oracle`` reads the environment's ``depends_on`` edges (``uses_support``,
    ``uses_failed``: KBLookup's word-overlap rule, a cheap stand-in that only environments with that answer key
    report); ``probe`` reads the policy's counterfactual influence probe (``probe_uses_support``,
    ``probe_uses_failed``, polo.inputs.oracle_probes: an edge where replacing o_j by the environment's
    placeholder lowers the log-likelihood of turn k's action by more than ``influence_threshold`` nats per
    token; support or failed use by turn j's own ``valid``/``tool_error`` flags), which any text environment
    gives. Inputs ``traj``, ``step``, ``tool_error`` and the two bitmasks of the source. Diagnostics:
    ``iapo/weight_max``, ``iapo/weight_min``, ``iapo/reach_frac`` (share of rows reached) and
    ``iapo/fail_frac`` (share of rows whose tool call failed).
    """

    paper = "IAPO: Influence-Aware Policy Optimization (arXiv id not found)"
    provenance = "RECONSTRUCTED"
    requires: ClassVar[frozenset[str]] = frozenset({"traj", "step", "tool_error", *EDGE_INPUTS["oracle"]})

    influence: Literal["oracle", "probe"] = "oracle"
    """Source of the influence graph: the environment's ``depends_on`` answer key (``oracle``) or the policy's
    counterfactual probe (``probe``); the shipped recipe names it."""
    influence_threshold: float = Field(default=INFLUENCE_THRESHOLD, gt=0)
    """τ of the probe: an edge j → k when showing o_j raises the mean log-prob of turn k's action tokens by
    more than τ nats (read by the ``probe_uses_*`` provider; unused with ``influence: oracle``)."""

    lambda_s: float = Field(default=1.0, ge=0)
    """Extra weight λ_s of a turn on a support path to the final turn, for a positive trajectory advantage."""
    lambda_f: float = Field(default=1.0, ge=0)
    """Extra weight λ_f per failure mark (own tool error, use of a failed observation), for a negative one."""
    rho: float = Field(default=0.5, gt=0, le=1)
    """Factor ρ on a failed turn's weight when the trajectory advantage is positive."""
    eps: float = Field(default=1e-6, gt=0)
    """Added to the std of the trajectory z-score."""

    def needs(self) -> set[str]:
        return {"traj", "step", "tool_error", *EDGE_INPUTS[self.influence]}

    def __call__(self, batch: RolloutBatch) -> AdvantageResult:
        who = "advantage iapo"
        mask = batch.mask
        reward = episode_reward(batch, who)
        inputs = {name: step_input(batch, name, who) for name in sorted(self.needs())}
        traj, step = inputs["traj"], inputs["step"]
        tinv, n_traj, _ = trajectories(traj, batch.group, who, step)
        fail = binary_input(inputs["tool_error"], "tool_error", who)
        names = EDGE_INPUTS[self.influence]
        support, failed = (inputs[name].long() for name in names)
        shift = step.long().clamp(max=MAX_BITS)
        for name, bits in zip(names, (support, failed)):
            if not bool(((bits >= 0) & ((bits >> shift) == 0)).all()):
                raise ValueError(f"{who}: the step-row input {name!r} must be a non-negative bitmask with bits "
                                 "only for earlier turns of the same trajectory (bit j < the row's step)")
        adv_traj = trajectory_advantage(reward, batch.group, traj, tinv, n_traj, self.eps, who)
        reach = support_reach(tinv, step, support, n_traj)
        w = routing_weights(adv_traj, reach, fail, failed != 0, tinv, n_traj, self.lambda_s, self.lambda_f,
                            self.rho)
        adv = adv_traj * w
        rows = len(adv) > 0
        diagnostics = {
            "iapo/weight_max": float(w.max()) if rows else 0.0,
            "iapo/weight_min": float(w.min()) if rows else 0.0,
            "iapo/reach_frac": float(reach.double().mean()) if rows else 0.0,
            "iapo/fail_frac": float(fail.double().mean()) if rows else 0.0,
        }
        return AdvantageResult(adv[:, None] * mask, diagnostics=diagnostics)
