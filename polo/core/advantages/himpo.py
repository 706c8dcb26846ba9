"""HiMPO: memory-write turns credited by their hindsight-filtered local utility, other turns by the outcome."""
from __future__ import annotations

from typing import ClassVar, Literal

import torch
from pydantic import Field

from polo.core.advantages.base import AdvantageEstimator, AdvantageResult
from polo.core.advantages.episode_terms import trajectory_advantage
from polo.core.advantages.step_inputs import binary_input, episode_reward, step_input, trajectories
from polo.core.agent_primitives import group_norm
from polo.core.batch import RolloutBatch
from polo.core.registry import ADVANTAGES

RELEVANCE_INPUTS = {"oracle": "memory_relevance", "probe": "probe_relevance"}
"""The step-row input holding the hindsight relevance ρ, per ``HiMPO.relevance`` source."""


@ADVANTAGES.register("himpo")
class HiMPO(AdvantageEstimator):
    """Memory rows get ``A^mem``, every other step row the trajectory advantage ``A^traj``.

    ``A^traj_i`` is the z-score of the episode outcome over the trajectories of the task group (``std_u``; a
    group of one trajectory: mean 0, std 1). A memory write (``memory_write = 1``) is judged on its own, not by
    the outcome: its local utility ``U`` (``memory_utility``, how much better the gold target can be recovered
    from the memory after the write than before, from the same state) is damped by a bounded hindsight
    relevance ``h = h_min + (1 − h_min)·ρ``, ``ρ ∈ [0, 1]``: credit ``c = U·h``. The source of ρ is
    ``relevance``: ``oracle``, the share of the gold evidence words the write added (``memory_relevance``, an
    answer key only polo's KBLookup reports, the cheap stand-in); ``probe``, the share of the surprisal of the
    trajectory's final action, after only the task and the memory, that the write removed (``probe_relevance``
    from the policy, polo.inputs.oracle_probes). ``A^mem`` is the z-score of ``c`` over all memory writes of the
    task group (``std_u``; a single write keeps ``c``, mean 0 std 1), or ``c`` itself with ``normalize: false``.
    Broadcast over each row's action tokens.

    A write that happens to precede a failure for unrelated reasons (a tool error, a reasoning slip) is then
    not blamed, and a write that looks useful but holds nothing relevant earns at most ``h_min`` of its
    utility. Paper: "HiMPO: Hindsight-Informed Memory Policy Optimization for Less-Entangled Credit in
    Long-Horizon Agents" (arXiv:2606.16285). Reconstructed from the abstract (local utility between the previous
    and updated memory, a bounded hindsight-relevance filter, memory advantage on memory tokens only): the
    log-likelihood probe behind ``U``, both relevance sources, ``h_min`` and the group normalization are our
    design. In step rows the whole action of a memory-write turn counts as memory tokens (our simplification);
    a trajectory's outcome is the mean of its rows' rewards. Inputs ``traj``, ``step``, ``memory_write``,
    ``memory_utility`` and the relevance of the source. Diagnostics: ``himpo/memory_rows`` (count),
    ``himpo/credit_mean`` (mean ``c`` over writes), ``himpo/relevance_mean`` (mean ρ over writes) and
    ``himpo/memory_adv_abs_mean``.
    """

    paper = ("HiMPO: Hindsight-Informed Memory Policy Optimization for Less-Entangled Credit in Long-Horizon "
             "Agents (arXiv:2606.16285)")
    provenance = "RECONSTRUCTED"
    requires: ClassVar[frozenset[str]] = frozenset(
        {"traj", "step", "memory_write", "memory_utility", "memory_relevance"})

    relevance: Literal["oracle", "probe"] = "oracle"
    """Source of the hindsight relevance ρ: the environment's gold-evidence share (``oracle``) or the policy's
    final-action probe (``probe``); the shipped recipe names it."""
    h_min: float = Field(default=0.2, ge=0, le=1)
    """Floor h_min of the hindsight filter: the share of utility an entirely irrelevant write keeps."""
    normalize: bool = True
    """Z-score the memory credits over the group's memory writes (False: use the raw credit c)."""
    eps: float = Field(default=1e-6, gt=0)
    """Added to every std of a z-score."""

    def needs(self) -> set[str]:
        return {"traj", "step", "memory_write", "memory_utility", RELEVANCE_INPUTS[self.relevance]}

    def __call__(self, batch: RolloutBatch) -> AdvantageResult:
        who = "advantage himpo"
        mask = batch.mask
        reward = episode_reward(batch, who)
        inputs = {name: step_input(batch, name, who) for name in sorted(self.needs())}
        traj, group = inputs["traj"], batch.group
        tinv, n_traj, _ = trajectories(traj, group, who, inputs["step"])
        memory = binary_input(inputs["memory_write"], "memory_write", who)
        name = RELEVANCE_INPUTS[self.relevance]
        relevance = inputs[name].to(reward)
        if not bool(((relevance >= 0) & (relevance <= 1)).all()):
            raise ValueError(f"{who}: the step-row input {name!r} must lie in [0, 1]")
        adv_traj = trajectory_advantage(reward, group, traj, tinv, n_traj, self.eps, who)
        credit = inputs["memory_utility"].to(reward) * (self.h_min + (1 - self.h_min) * relevance)
        adv_mem = group_norm(credit, group, "mean_std", eps=self.eps, members=memory) if self.normalize else credit
        adv = torch.where(memory, adv_mem, adv_traj)
        n_mem = int(memory.sum())
        diagnostics = {
            "himpo/memory_rows": float(n_mem),
            "himpo/credit_mean": float(credit[memory].mean()) if n_mem else 0.0,
            "himpo/relevance_mean": float(relevance[memory].mean()) if n_mem else 0.0,
            "himpo/memory_adv_abs_mean": float(adv_mem[memory].abs().mean()) if n_mem else 0.0,
        }
        return AdvantageResult(adv[:, None] * mask, diagnostics=diagnostics)
