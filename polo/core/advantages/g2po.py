"""G2PO: standardized TD errors on the state-transition graph that a task group's trajectories share."""
from __future__ import annotations

from typing import ClassVar, Literal

import torch
from pydantic import Field

from polo.core.advantages.base import AdvantageEstimator, AdvantageResult
from polo.core.advantages.episode_terms import episode_advantage
from polo.core.advantages.step_inputs import episode_reward, step_input
from polo.core.agent_primitives import discounted_returns, group_moments
from polo.core.batch import RolloutBatch
from polo.core.registry import ADVANTAGES

G2PO_INPUTS = ("traj", "step", "anchor", "next_anchor", "step_reward")


@ADVANTAGES.register("g2po")
class G2PO(AdvantageEstimator):
    """``A_n = Â_{e(n)} + w_ep·A^E_n`` on step rows (one row per turn), broadcast over the row's response tokens.

    Per task group g (``batch.group``) the trajectories form one graph: a node is an ``anchor`` id (equal ids,
    equal states, merged across trajectories) plus the terminal sink ⊥ (``next_anchor = −1``); the turn of row
    n is the edge ``e = (anchor_n, next_anchor_n)``. With the return-to-go ``G = disc(step_reward, γ)`` of each
    row, the node value is ``V(s) = mean{G_n : anchor_n = s}`` over every visit of s in g, ``V(⊥) = 0``; the
    edge reward ``r_e`` is the mean ``step_reward`` of the edge's rows, and its TD error is
    ``δ_e = r_e + γ·V(s') − V(s)``. Standardization inside g: ``Â_e = (δ_e − mean δ)/(std_u δ + eps)`` with the
    statistics over the group's distinct edges (``edge_stats: unique``, each edge counted once) or over its rows
    (``instances``). Pooling the group's visits of a state lowers the variance of its value, and the TD error
    credits a step with the progress its transition makes.

    ``A^E`` (weight ``w_ep``, 0 by default) is GiGPO's episode term (``episode_terms.episode_advantage`` with
    ``episode_mode``, ``stats_over`` and ``eps``). The engine resolves the end of a trajectory (⊥ after a
    terminal step; after a truncated one the final observation's anchor, or ⊥ when no row of the group acted in
    it); our choices: a ``next_anchor`` that no row of the group acted in still counts as ⊥ here (its value
    would be undefined), and a group with a single distinct edge (or a single row, for ``instances``) gets
    ``Â = 0``, as there is nothing to compare. All steps are vectorized (``torch.unique`` over
    (group, state) and (group, edge) keys). Paper: "Group-Graph Policy Optimization" (arXiv:2606.22995).
    Diagnostics: ``g2po/nodes`` (distinct (group, anchor) states acted in, ⊥ not counted), ``g2po/edges``
    (distinct (group, edge) pairs) and ``g2po/td_abs_mean`` (mean |δ| over the distinct edges).
    """

    paper = "Group-Graph Policy Optimization (arXiv:2606.22995)"
    provenance = "SECONDARY"
    requires: ClassVar[frozenset[str]] = frozenset(G2PO_INPUTS)

    gamma: float = Field(default=0.95, ge=0, le=1)
    """Discount of the step rewards in the returns-to-go and of the next state's value in the TD error."""
    edge_stats: Literal["unique", "instances"] = "unique"
    """Standardize the TD errors over the group's distinct edges (unique) or over its step rows (instances)."""
    w_ep: float = Field(default=0.0, ge=0)
    """Weight of GiGPO's episode advantage added to the edge advantage (0: edge advantage only)."""
    episode_mode: Literal["mean_norm", "mean_std_norm"] = "mean_norm"
    """Episode term: centre the episode reward on its group (mean_norm), or also divide by std_u + eps."""
    stats_over: Literal["steps", "trajectories"] = "steps"
    """Episode term statistics over every step row of the group, or one value per trajectory."""
    eps: float = Field(default=1e-6, gt=0)
    """Added to the std of the TD errors (and of the episode term in mean_std_norm)."""

    def __call__(self, batch: RolloutBatch) -> AdvantageResult:
        mask = batch.mask
        who = "advantage g2po"
        reward = episode_reward(batch, who)
        inputs = {name: step_input(batch, name, who) for name in sorted(self.needs())}
        traj, step, anchor, nxt = inputs["traj"], inputs["step"], inputs["anchor"].long(), inputs["next_anchor"].long()
        if anchor.numel() and int(anchor.min()) < 0:
            raise ValueError(f"{who}: the input 'anchor' must hold ids ≥ 0 (−1 is the terminal sink of next_anchor)")
        if nxt.numel() and int(nxt.min()) < -1:
            raise ValueError(f"{who}: the input 'next_anchor' must hold anchor ids ≥ 0 or −1 (the terminal sink)")
        group = batch.group.long()
        N = len(reward)
        step_reward = inputs["step_reward"].to(reward)
        returns = discounted_returns(step_reward, traj, step, self.gamma)  # also checks traj/step
        a_ep = episode_advantage(reward, batch.group, traj, "mean_std" if self.episode_mode == "mean_std_norm"
                                 else "mean", self.stats_over, self.eps, who)
        # Nodes: the (group, anchor) keys of the rows and of their next states, in one id space.
        keys = torch.cat([torch.stack([group, anchor], 1), torch.stack([group, nxt], 1)])
        uniq, inv = torch.unique(keys, dim=0, return_inverse=True)
        src, dst = inv[:N], inv[N:]
        value_row = group_moments(returns, src, singleton="self_mean")[0]  # V(anchor_n), exact for equal G
        value = returns.new_zeros(len(uniq)).index_copy(0, src, value_row)
        visited = torch.zeros(len(uniq), dtype=torch.bool, device=inv.device).index_fill(0, src, True)
        sink = (nxt < 0) | ~visited[dst]
        nxt = torch.where(sink, -1, nxt)
        v_next = torch.where(sink, 0.0, value[dst])
        # Edges: (group, anchor, next) with the mean step reward of their instances.
        edge = torch.unique(torch.stack([group, anchor, nxt], 1), dim=0, return_inverse=True)[1]
        r_edge = group_moments(step_reward, edge, singleton="self_mean")[0]
        delta = r_edge + self.gamma * v_next - value_row
        members = None
        if self.edge_stats == "unique":
            rows = torch.arange(N, device=edge.device)
            n_edges = int(edge.max()) + 1 if N else 0
            first = torch.full((n_edges,), N, dtype=torch.long, device=edge.device).scatter_reduce(
                0, edge, rows, "amin")
            members = torch.zeros(N, dtype=torch.bool, device=edge.device)
            members[first] = True
        mean, std, _ = group_moments(delta, group, members, singleton="self_mean")
        a_edge = (delta - mean) / (std + self.eps)
        adv = a_edge + self.w_ep * a_ep if self.w_ep > 0 else a_edge
        n_edges = int(edge.max()) + 1 if N else 0
        td_edge = delta.new_zeros(n_edges).index_copy(0, edge, delta)
        diagnostics = {
            "g2po/nodes": float(torch.unique(src).numel()),
            "g2po/edges": float(n_edges),
            "g2po/td_abs_mean": float(td_edge.abs().mean()) if n_edges else 0.0,
        }
        return AdvantageResult(adv[:, None] * mask, diagnostics=diagnostics)
