"""GiGPO: an episode-level group advantage plus a step-level advantage inside anchor-state groups (step rows).

The episode term, which other step-row estimators share, is ``episode_terms.episode_advantage``."""
from __future__ import annotations

from typing import ClassVar, Literal

import torch
from pydantic import Field
from torch import Tensor

from polo.core.advantages.base import AdvantageEstimator, AdvantageResult
from polo.core.advantages.episode_terms import episode_advantage
from polo.core.advantages.step_inputs import episode_reward, step_input
from polo.core.agent_primitives import discounted_returns, group_norm
from polo.core.batch import RolloutBatch
from polo.core.registry import ADVANTAGES

GIGPO_INPUTS = ("traj", "step", "anchor", "step_reward")


@ADVANTAGES.register("gigpo")
class GiGPO(AdvantageEstimator):
    """``A_n = A^E_n + w·A^S_n`` on step rows (one row per turn), broadcast over the row's response tokens.

    Episode level, in the row's task group g (``batch.group``): ``A^E_n = R_n − mean(S_g)`` (``mean_norm``) or
    ``(R_n − mean(S_g)) / (std_u(S_g) + eps)`` (``mean_std_norm``), ``R_n`` the row's weighted total reward (the
    episode reward, written on every step row of its trajectory). ``S_g`` holds every step row of g
    (``stats_over: steps``, so a trajectory weighs by its number of turns) or one value per trajectory, its
    rows' mean (``stats_over: trajectories``); a one-member ``S_g`` gives mean 0, std 1 (as ``grpo``).

    Step level: rows of g whose ``anchor`` ids are equal (the same environment state) form an anchor group C;
    with the return-to-go ``G_n = Σ_{k≥t} γ^{k−t} r_k`` of the row's trajectory from its turn t on (``r`` =
    ``step_reward``), ``A^S_n = G_n − mean_C(G)`` or ``(G_n − mean_C(G)) / (std_u,C(G) + eps)``. A singleton
    anchor group (a state no other step visited) gets ``A^S = 0``; so does a group whose returns are all equal.

    Comparing actions taken from the same state estimates ``Q(s, a) − V(s)`` without a critic, while the
    episode term keeps GRPO's trajectory-level comparison. The rows of a trajectory may come in any order;
    ``step`` orders them. Inputs ``traj``, ``step``, ``anchor`` (integer ids; similarity clustering of anchor
    texts, ``polo.core.agent_primitives.anchor_ids``, is the engine's to apply when it writes ``anchor``) and
    ``step_reward`` are ``[N]`` extras. With ``step_advantage_w: 0``, ``stats_over: trajectories`` and
    ``mode: mean_std_norm`` this is trajectory-level GRPO on step rows (the paper's episode term); plain ``grpo``
    on step rows is the step-weighted variant verl-agent runs as its GRPO baseline. Formulas follow
    verl-agent's ``gigpo/core_gigpo.py``. Diagnostics: ``gigpo/anchor_groups`` (count),
    ``gigpo/anchor_group_size_mean``, ``gigpo/anchor_singleton_frac`` (share of anchor groups with one step) and
    ``gigpo/step_adv_abs_mean``.
    """

    paper = "Group-in-Group Policy Optimization for LLM Agent Training (arXiv:2505.10978)"
    provenance = "CODE"
    requires: ClassVar[frozenset[str]] = frozenset(GIGPO_INPUTS)

    gamma: float = Field(default=0.95, ge=0, le=1)
    """Discount of the step rewards in the return-to-go of the step level."""
    step_advantage_w: float = Field(default=1.0, ge=0)
    """Weight w of the step-level advantage (0: episode level only)."""
    mode: Literal["mean_norm", "mean_std_norm"] = "mean_norm"
    """Both levels: subtract the group mean (mean_norm), or also divide by the group's unbiased std + eps."""
    stats_over: Literal["steps", "trajectories"] = "steps"
    """Episode statistics over every step row of the group (verl-agent), or one value per trajectory."""
    eps: float = Field(default=1e-6, gt=0)
    """Added to the std in mean_std_norm."""

    def needs(self) -> set[str]:
        if self.step_advantage_w > 0:
            return set(self.requires)
        return {"traj"} if self.stats_over == "trajectories" else set()

    def episode_term(self, batch: RolloutBatch, who: str,
                     skip: frozenset[str] = frozenset()) -> tuple[Tensor, dict[str, Tensor], str, Tensor]:
        """``(episode reward [N], the checked step inputs of needs() but skip, the group_norm mode, A^E [N])``."""
        reward = episode_reward(batch, who)
        inputs = {name: step_input(batch, name, who) for name in sorted(self.needs() - skip)}
        mode = "mean_std" if self.mode == "mean_std_norm" else "mean"
        a_ep = episode_advantage(reward, batch.group, inputs.get("traj"), mode, self.stats_over, self.eps, who)
        return reward, inputs, mode, a_ep

    def __call__(self, batch: RolloutBatch) -> AdvantageResult:
        mask = batch.mask
        reward, inputs, mode, a_ep = self.episode_term(batch, "advantage gigpo")
        group = batch.group
        diagnostics: dict[str, float] = {}
        adv = a_ep
        if self.step_advantage_w > 0:
            step, anchor = inputs["step"], inputs["anchor"]
            returns = discounted_returns(inputs["step_reward"].to(reward), inputs["traj"], step, self.gamma)
            cluster = torch.unique(torch.stack([group.long(), anchor.long()], 1), dim=0, return_inverse=True)[1]
            a_step = group_norm(returns, cluster, mode, singleton="self_mean", eps=self.eps)
            adv = a_ep + self.step_advantage_w * a_step
            size = torch.bincount(cluster).double()
            diagnostics = {
                "gigpo/anchor_groups": float(len(size)),
                "gigpo/anchor_group_size_mean": float(size.mean()) if len(size) else 0.0,
                "gigpo/anchor_singleton_frac": float((size == 1).double().mean()) if len(size) else 0.0,
                "gigpo/step_adv_abs_mean": float(a_step.abs().mean()) if len(a_step) else 0.0,
            }
        return AdvantageResult(adv[:, None] * mask, diagnostics=diagnostics)
