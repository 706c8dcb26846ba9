"""ReflectPO: tree-structured credit (value of the child node minus value of the parent node) with a
recovery-gain bonus for actions that lead out of an erroneous state, on step rows of rollout trees."""
from __future__ import annotations

from typing import ClassVar

import torch
from pydantic import Field
from torch import Tensor

from polo.core.advantages.base import AdvantageEstimator, AdvantageResult
from polo.core.advantages.episode_terms import trajectory_mean
from polo.core.advantages.step_inputs import binary_input, episode_reward, step_input, trajectories
from polo.core.agent_primitives import check_steps, group_moments
from polo.core.batch import RolloutBatch
from polo.core.registry import ADVANTAGES
from polo.core.segment import segment_sum

REFLECTPO_INPUTS = ("traj", "step", "anchor", "next_anchor", "valid", "tool_error")
TIE_SLACK = 1e-6
"""Slack of the sibling-gap test ``gap ≥ delta_err``, so that a gap equal to ``delta_err`` in exact arithmetic
still counts after float32 rounding of the node means."""


def tree_nodes(traj: Tensor, step: Tensor, parent: Tensor, group: Tensor, who: str):
    """The rollout trees of step rows. Returns ``(tinv [N], n_traj, node_of [n_traj, W], parent_node [N],
    root_of [n_traj], n_groups)``.

    Node ids: row r is the node reached by its turn (the state after it); ``N + k`` is the root (the state
    before turn 0) of the k-th task group. ``node_of[i, t]`` is the node after turn t on trajectory i's path
    (its own row, or the row of the ancestor that owns turn t; −1 past its last turn), ``parent_node[r]`` the
    node the row's turn was taken in. Validates ``parent``: integer ``[N]``, one value per trajectory, −1 or the
    id of a trajectory of the same group, acyclic, the owner chain covering every copied turn. The loops run
    over the tree depth only."""
    N = traj.shape[0]
    if parent is None or parent.shape != (N,) or parent.is_floating_point() or parent.dtype == torch.bool:
        got = "none" if parent is None else f"shape {tuple(parent.shape)}, dtype {parent.dtype}"
        raise ValueError(f"{who} needs batch.parent as an integer [{N}] tensor (the parent trajectory's traj id, "
                         f"-1 for a root episode); got {got}")
    ids, tinv = torch.unique(traj, return_inverse=True)
    n_traj = len(ids)
    dev = traj.device
    step, parent = step.long(), parent.long()
    big = torch.iinfo(torch.long).max
    first = torch.full((n_traj,), big, dtype=torch.long, device=dev).scatter_reduce(0, tinv, step, "amin")
    try:  # a branch's rows carry the steps s_j..last_j, each once
        check_steps(traj, step - first[tinv])
    except ValueError as err:
        raise ValueError(f"{who}: {err} (a branch's steps start at its branch step)") from None
    last = torch.full((n_traj,), -1, dtype=torch.long, device=dev).scatter_reduce(0, tinv, step, "amax")
    g_lo = trajectories(traj, group, who)[2].long()  # the task group of each trajectory
    p_lo = torch.full((n_traj,), big, dtype=torch.long, device=dev).scatter_reduce(0, tinv, parent, "amin")
    p_hi = torch.full((n_traj,), -big, dtype=torch.long, device=dev).scatter_reduce(0, tinv, parent, "amax")
    if not bool((p_lo == p_hi).all()):
        raise ValueError(f"{who}: batch.parent must be equal on every row of a trajectory")
    pos = torch.searchsorted(ids, p_lo).clamp_max(n_traj - 1)
    known = ids[pos] == p_lo
    if not bool(((p_lo == -1) | known).all()):
        raise ValueError(f"{who}: batch.parent holds an id that is neither -1 nor the traj id of a trajectory in "
                         "the batch")
    ptr = torch.where(p_lo == -1, -1, pos)
    is_branch = ptr >= 0
    if bool((is_branch & (ptr == torch.arange(n_traj, device=dev))).any()):
        raise ValueError(f"{who}: a trajectory is its own parent (batch.parent)")
    if bool((is_branch & (g_lo[ptr.clamp_min(0)] != g_lo)).any()):
        raise ValueError(f"{who}: a branch's parent trajectory belongs to another task group (batch.group)")
    if bool((~is_branch & (first != 0)).any()):
        raise ValueError(f"{who}: a root trajectory (batch.parent = -1) must have rows from step 0")
    # Depth of every trajectory by pointer chasing (one iteration per tree level); a cycle never ends.
    depth = torch.zeros(n_traj, dtype=torch.long, device=dev)
    cur = ptr
    for _ in range(n_traj + 1):
        up = cur >= 0
        if not bool(up.any()):
            break
        depth += up.long()
        cur = torch.where(up, ptr[cur.clamp_min(0)], -1)
    else:
        raise ValueError(f"{who}: batch.parent links form a cycle")
    width = int(last.max()) + 1 if n_traj else 0
    node_of = torch.full((n_traj, width), -1, dtype=torch.long, device=dev)
    node_of[tinv, step] = torch.arange(N, device=dev)
    copied = is_branch[:, None] & (torch.arange(width, device=dev)[None] < first[:, None])
    for _ in range(int(depth.max()) if n_traj else 0):  # copied turns take their parent's nodes, level by level
        node_of = torch.where(copied, node_of[ptr.clamp_min(0)], node_of)
    on_path = torch.arange(width, device=dev)[None] <= last[:, None]
    if bool((on_path & (node_of < 0)).any()):
        raise ValueError(f"{who}: a branch starts after a turn its parent chain does not have (its first step "
                         "exceeds the parent's last step + 1)")
    _, ginv = torch.unique(g_lo, return_inverse=True)
    n_groups = int(ginv.max()) + 1 if n_traj else 0
    root_of = N + ginv
    prev = node_of[tinv, (step - 1).clamp_min(0)]
    parent_node = torch.where(step == 0, root_of[tinv], prev)
    return tinv, n_traj, node_of, parent_node, root_of, n_groups


@ADVANTAGES.register("reflectpo")
class ReflectPO(AdvantageEstimator):
    """``A_r = D + eta·max(0, D)·err(p) [+ w_o·z_i]`` with ``D = V(c) − V(p)`` for the turn of row r, the tree
    edge ``p → c``, broadcast over the row's response tokens.

    Tree (per task group, ``batch.group``): a node is the state after a turn. The G root episodes
    (``batch.parent = −1``) share the root node (the state before turn 0); a recovery branch j
    (``batch.parent`` = its parent's traj id) owns only the turns from its first row's step ``s_j`` on, and
    its turns ``t < s_j`` are its parent's (nodes owned by the trajectory up the parent chain that played
    them). Row r (trajectory i, turn t) is the edge from the node after turn t−1 of i's path (the root for
    t = 0) to the node after turn t; every trajectory ends in a leaf carrying its episode return ``R_i``
    (the mean of its rows' scalar rewards, equal on every row).

    Values and flags: ``V(n) = mean{R_i : trajectory i's path passes through n}`` (a Monte Carlo mean over
    leaves, not over children). ``err(n) = 1`` when (i) ``next_anchor`` of the turn into n equals the
    ``anchor`` of a turn on the root-to-n path, that turn included (a repeated visit; ``next_anchor = −1``,
    terminal, never matches), (ii) that turn was invalid (``valid = 0``) or hit a tool error
    (``tool_error = 1``), or (iii) another child of n's parent has a value exceeding ``V(n)`` by at least
    ``delta_err``. The root is never erroneous. The recovery gain ``max(0, D)·err(p)`` rewards actions that
    raise the value when they leave an erroneous state. Optionally ``z_i = (R_i − mean_g R)/(std_u,g R + eps)``
    over the group's leaves (one per trajectory; a group of one trajectory gives 0) is added with weight ``w_o``
    to every row of i.

    Without branches each trajectory is a chain: its first row gets ``R_i − mean_g R`` and its later rows 0
    (a chain node's value is its own return, and the root is never erroneous). Our choices
(the paper's credit is reconstructed from its abstract): value = leaf mean, the three error rules, ``eta``,
    ``delta_err``, the leaf-return term, the 1e-6 slack of the sibling-gap test against rounding. A branch
    that continues from another trajectory's final state makes that state both a leaf and an interior node;
    its single outgoing edge then has ``D ≠ 0``, as the formula gives. The hint-guided re-sampling that grows
    recovery branches is the rollout engine's. Vectorized; the only loops run over the tree depth (copied
    turns inherit their parent's nodes level by level; cycle detection). Paper: "ReflectPO:
    Reflection-guided Policy Optimization" (arXiv id not found). Diagnostics: ``reflectpo/err_frac`` (share of
    the nodes with at least one child, roots included, that are flagged) and ``reflectpo/tree_leaves_mean``
    (leaves, i.e. trajectories, per task-group tree).
    """

    paper = "ReflectPO: Reflection-guided Policy Optimization (arXiv id not found)"
    provenance = "RECONSTRUCTED"
    requires: ClassVar[frozenset[str]] = frozenset(REFLECTPO_INPUTS)

    eta: float = Field(default=0.5, ge=0)
    """Weight of the recovery gain max(0, V(c) − V(p)) on edges leaving an erroneous node p."""
    delta_err: float = Field(default=0.5, ge=0)
    """A node is erroneous when a sibling's value exceeds its own by at least this much (0: ties count)."""
    w_o: float = Field(default=0.0, ge=0)
    """Weight of the leaf-return z-score (R_i − group mean)/(std_u + eps) added to every row of trajectory i."""
    eps: float = Field(default=1e-6, gt=0)
    """Added to the std of the leaf returns in the w_o term."""

    def __call__(self, batch: RolloutBatch) -> AdvantageResult:
        mask = batch.mask
        who = "advantage reflectpo"
        reward = episode_reward(batch, who)
        inputs = {name: step_input(batch, name, who) for name in REFLECTPO_INPUTS}
        N = reward.shape[0]
        if N == 0:
            return AdvantageResult(mask.clone(), diagnostics={"reflectpo/err_frac": 0.0,
                                                              "reflectpo/tree_leaves_mean": 0.0})
        invalid = ~binary_input(inputs["valid"], "valid", who)
        tool_error = binary_input(inputs["tool_error"], "tool_error", who)
        step = inputs["step"].long()
        anchor, next_anchor = inputs["anchor"].long(), inputs["next_anchor"].long()
        tinv, n_traj, node_of, parent_node, root_of, n_groups = tree_nodes(
            inputs["traj"], step, batch.parent, batch.group, who)
        n_nodes = N + n_groups
        ret = trajectory_mean(reward, tinv, n_traj)  # R_i, one leaf per trajectory

        # V(n): every trajectory adds its return to each node of its path (its turns' nodes and its root).
        on = node_of >= 0
        path_nodes = torch.cat([node_of[on], root_of])
        path_ret = torch.cat([ret[:, None].expand_as(node_of)[on], ret])
        v_sum = segment_sum(path_ret, path_nodes, n_nodes)
        v_cnt = segment_sum(torch.ones_like(path_ret), path_nodes, n_nodes)
        value = v_sum / v_cnt.clamp_min(1)

        # err of every row's node (the root's is 0).
        cols = torch.arange(node_of.shape[1], device=step.device)
        path = node_of[tinv]  # [N, W] the row's trajectory path
        seen = torch.where(path >= 0, anchor[path.clamp_min(0)], -1)
        upto = cols[None] <= step[:, None]
        repeated = ((seen == next_anchor[:, None]) & upto & (path >= 0)).any(1) & (next_anchor >= 0)
        child_v, parent_of = value[:N], parent_node
        top = torch.full((n_nodes,), -torch.inf, dtype=value.dtype, device=value.device)
        m1 = top.scatter_reduce(0, parent_of, child_v, "amax")
        at_max = child_v == m1[parent_of]
        n_at_max = segment_sum(at_max.to(value.dtype), parent_of, n_nodes)
        m2 = top.scatter_reduce(0, parent_of, torch.where(at_max, -torch.inf, child_v), "amax")
        alone_at_max = at_max & (n_at_max[parent_of] == 1)
        best_other = torch.where(alone_at_max, m2[parent_of], m1[parent_of])
        behind = (best_other - child_v) >= self.delta_err - TIE_SLACK  # -inf gap when no sibling
        err_row = repeated | invalid | tool_error | behind
        err = torch.cat([err_row, err_row.new_zeros(n_groups)])

        d = child_v - value[parent_of]
        adv = d + self.eta * d.clamp_min(0) * err[parent_of].to(d.dtype)
        if self.w_o > 0:
            rows = torch.arange(N, device=step.device)
            first = torch.full((n_traj,), N, dtype=torch.long, device=rows.device).scatter_reduce(
                0, tinv, rows, "amin")
            member = torch.zeros(N, dtype=torch.bool, device=rows.device)
            member[first] = True
            per_row = ret[tinv]
            mean, std, _ = group_moments(per_row, batch.group, member, singleton="self_mean")
            adv = adv + self.w_o * (per_row - mean) / (std + self.eps)

        parents = torch.unique(parent_of)
        diagnostics = {
            "reflectpo/err_frac": float(err[parents].double().mean()),
            "reflectpo/tree_leaves_mean": n_traj / n_groups,
        }
        return AdvantageResult(adv[:, None] * mask, diagnostics=diagnostics)
