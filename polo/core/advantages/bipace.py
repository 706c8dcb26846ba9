"""BiPACE: GiGPO's episode term plus a step term from hidden-state clusters (BiGPO) with action-conditioned
peer baselines (PACE), on step rows."""
from __future__ import annotations

from typing import ClassVar, Literal

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import Tensor

from polo.core.advantages.base import AdvantageResult
from polo.core.advantages.gigpo import GiGPO
from polo.core.agent_primitives import discounted_returns, group_moments
from polo.core.batch import RolloutBatch
from polo.core.registry import ADVANTAGES
from polo.core.segment import segment_sum

BIPACE_INPUTS = ("traj", "step", "anchor", "step_reward", "action_key", "context_hidden")


def _rank(key: Tensor) -> Tensor:
    """Dense rank ``[N]`` (0-based, ascending) of integer keys ``[N]``."""
    return torch.unique(key, return_inverse=True)[1]


def bigpo_clusters(hidden_unit: Tensor, group: Tensor, traj: Tensor, step: Tensor, anchor: Tensor | None,
                   tau_d: float, merge_exact: bool = True) -> Tensor:
    """BiGPO's cluster id of every step row, ``[N]`` (compact ids ``0..C−1``, ordered by group id, then by the
    order in which the clusters opened).

    ``hidden_unit`` ``[N, d]`` holds unit vectors (one per row). Inside each group (``group``) the atoms are
    the rows, or with ``merge_exact`` the sets of rows sharing an ``anchor`` id; an atom's vector is the
    normalized sum of its members' vectors, and atoms are taken in canonical order: by the position of their
    first member when the rows are sorted by (``traj`` id, ``step``). Leader clustering: an atom joins the
    existing cluster j whose centroid ``normalize(Σ_{m∈C_j} u_m)`` (a sum over member rows) has the largest
    cosine with it (lowest j on ties) when ``1 − cos ≤ tau_d``, else it opens a new cluster.

    First-fit clustering is sequential by definition: the loop runs over the atom rank inside a group (at most
    the group's number of steps), every group advancing at once. The cosines come from the per-group Gram
    matrix of atom sums, ``s_a·S_j`` and ``‖S_j‖²`` being updated incrementally, so an iteration costs
    O(groups · atoms) and the only O(d) work is one batched Gram product.
    """
    N = hidden_unit.shape[0]
    if N == 0:
        return torch.zeros(0, dtype=torch.long, device=group.device)
    dev = group.device
    u = hidden_unit.to(device=dev, dtype=torch.float64)
    g_idx = _rank(group.long())
    n_groups = int(g_idx.max()) + 1
    # canonical position of every row: sorted by (traj id, step); traj ids are unique in the batch
    order = torch.argsort(_rank(traj.long()) * (int(step.max()) + 1) + step.long())
    pos = torch.empty_like(order)
    pos[order] = torch.arange(N, device=dev)
    if merge_exact:
        if anchor is None:
            raise ValueError("bigpo_clusters: merge_exact needs the anchor ids")
        atom = torch.unique(torch.stack([g_idx, anchor.long()], 1), dim=0, return_inverse=True)[1]
    else:
        atom = torch.arange(N, device=dev)
    n_atoms = int(atom.max()) + 1
    first = torch.full((n_atoms,), N, dtype=torch.long, device=dev).scatter_reduce(0, atom, pos, "amin")
    atom_group = torch.zeros(n_atoms, dtype=torch.long, device=dev).scatter(0, atom, g_idx)
    # rank of each atom inside its group by its first canonical position
    by_first = torch.argsort(atom_group * (N + 1) + first)
    counts = torch.bincount(atom_group, minlength=n_groups)
    starts = torch.cumsum(counts, 0) - counts
    local = torch.empty(n_atoms, dtype=torch.long, device=dev)
    local[by_first] = torch.arange(n_atoms, device=dev) - starts[atom_group[by_first]]
    K = int(counts.max())
    sums = torch.zeros(n_groups, K, u.shape[1], dtype=torch.float64, device=dev)
    sums.index_put_((atom_group[atom], local[atom]), u, accumulate=True)
    gram = sums @ sums.transpose(1, 2)  # [groups, K, K]: s_a · s_b inside each group
    atom_norm = torch.diagonal(gram, dim1=1, dim2=2).clamp_min(0).sqrt()  # [groups, K]

    rows = torch.arange(n_groups, device=dev)
    proj = torch.zeros(n_groups, K, K, dtype=torch.float64, device=dev)  # proj[g, a, j] = s_a · S_j
    norm2 = torch.zeros(n_groups, K, dtype=torch.float64, device=dev)  # ‖S_j‖²
    opened = torch.zeros(n_groups, dtype=torch.long, device=dev)
    assign = torch.zeros(n_groups, K, dtype=torch.long, device=dev)
    slots = torch.arange(K, device=dev)
    for k in range(K):
        live = k < counts
        dot = proj[:, k, :]
        cos = dot / (atom_norm[:, k, None] * norm2.clamp_min(0).sqrt()).clamp_min(1e-300)
        cos = torch.where(slots[None] < opened[:, None], cos, -torch.inf)
        best = cos.argmax(1)
        join = live & (opened > 0) & (1 - cos[rows, best] <= tau_d)
        j = torch.where(join, best, opened.clamp_max(K - 1))
        assign[:, k] = j
        w = live.to(torch.float64)
        norm2[rows, j] += w * (2 * dot[rows, j] * join + gram[:, k, k])
        proj[rows, :, j] += w[:, None] * gram[:, :, k]
        opened += (live & ~join).long()
    cluster = assign[atom_group, local][atom]
    return _rank(g_idx * K + cluster)


AT_CENTRE = 1e-5
"""A row whose hidden state lies within this fraction of its norm of its group's mean is at the centre (about 100
float32 ulps; distinct contexts of a shipped run deviate by 0.35 % or more)."""


def unit_hidden(batch: RolloutBatch, who: str, centre: bool) -> Tensor:
    """The rows' hidden vectors at their last context token (the ``context_hidden`` input ``[N, d]``), centred on
    their task group's mean when ``centre`` (``centred_units``), normalized, float64."""
    N = batch.batch_size
    where = (f"{who} needs the input 'context_hidden': the policy's hidden state at each row's last context token, "
             f"[{N}, d]")
    hidden = batch.require("context_hidden", where)
    if not hidden.is_floating_point() or hidden.dim() != 2 or hidden.shape[0] != N:
        raise ValueError(f"{where}; got shape {tuple(hidden.shape)} and dtype {hidden.dtype}")
    h = hidden.double()
    if not torch.isfinite(h).all():
        raise ValueError(f"{where}; it holds non-finite values")
    return centred_units(h, batch.group) if centre else F.normalize(h, dim=-1)


def centred_units(h: Tensor, group: Tensor) -> Tensor:
    """``normalize(h_n − mean_{m ∈ g(n)} h_m)`` per row ``[N, d]`` → ``[N, d + 1]``: the direction in which each
    hidden state departs from its task group's mean. The extra coordinate is 1 (before normalizing) on the rows
    at the centre (``‖h_n − mean‖ ≤ AT_CENTRE·‖h_n‖``, e.g. every row of a group holding one state), so those
    share one direction instead of having none."""
    _, g = torch.unique(group, return_inverse=True)
    n_g = int(g.max()) + 1 if g.numel() else 0
    mean = segment_sum(h, g, n_g) / torch.bincount(g, minlength=n_g).clamp_min(1)[:, None].to(h)
    dev = h - mean[g]
    at_centre = dev.norm(dim=-1) <= AT_CENTRE * h.norm(dim=-1)
    dev = torch.where(at_centre[:, None], 0.0, dev)
    return F.normalize(torch.cat([dev, at_centre[:, None].to(h)], -1), dim=-1)


def pace_advantage(returns: Tensor, cluster: Tensor, action: Tensor, variant: str, mode: str,
                   eps: float) -> Tensor:
    """PACE's step advantage ``[N]`` of rows in clusters ``cluster`` with actions ``action``: ``Q̂(C,a_n) − V̂(C)``
    (``variant="Q"``) or ``G_n − mean{G_m: m ∈ C, a_m ≠ a_n}`` falling back to ``G_n − V̂(C)`` without such
    peers (``"R"``); ``mode="mean_std"`` divides by ``std_u,C(G) + eps`` (1 for a singleton)."""
    v, std, n_c = group_moments(returns, cluster, singleton="self_mean")
    ca = torch.unique(torch.stack([cluster.long(), action.long()], 1), dim=0, return_inverse=True)[1]
    d = returns - v  # centred on the cluster mean: equal returns give exactly 0 below
    if variant == "Q":
        a_s = group_moments(d, ca, singleton="self_mean")[0]
    else:
        n = int(ca.max()) + 1 if ca.numel() else 0
        same_sum, same_n = segment_sum(d, ca, n)[ca], segment_sum(torch.ones_like(d), ca, n)[ca]
        _, cinv = torch.unique(cluster, return_inverse=True)
        c_sum = segment_sum(d, cinv, int(cinv.max()) + 1 if cinv.numel() else 0)[cinv]
        peers = n_c - same_n
        a_s = torch.where(peers > 0, d - (c_sum - same_sum) / peers.clamp_min(1), d)
    return a_s / (std + eps) if mode == "mean_std" else a_s


@ADVANTAGES.register("bipace")
class BiPACE(GiGPO):
    """``A_n = A^E_n + w·A^S_n`` on step rows (one row per turn), broadcast over the row's response tokens.

    ``A^E`` is GiGPO's episode term (``episode_terms.episode_advantage``: the row's episode reward minus the mean of
    its task group, divided by ``std_u + eps`` in ``mean_std_norm``; statistics over step rows or one value per
    trajectory). The step term replaces GiGPO's exact anchor groups:

    * BiGPO states: ``u_n = normalize(h_n − mean_g h)`` with ``h_n`` the policy's last-layer hidden state
      (``context_hidden``) at the row's last context token, i.e. the position that predicts the first action
      token, centred on the mean of its task group g (``centre``; ``h_n/‖h_n‖`` without). Per task group, atoms
      (rows sharing an ``anchor`` id when ``merge_exact_obs_first``, else single rows) with vector
      ``normalize(Σ u)`` are leader-clustered in canonical order (ascending ``traj`` id, then ``step``): an atom
      joins the cluster j maximizing ``u_x·c_j`` (``c_j = normalize(Σ_{m∈C_j} u_m)``, lowest j on ties) if
      ``1 − u_x·c_j ≤ tau_d``, else opens a cluster (``bigpo_clusters``).
    * PACE, inside a cluster C with returns-to-go ``G`` (``disc(step_reward, γ)``) and actions ``a`` (the
      ``action_key`` ids): ``V̂ = mean_C G``, ``Q̂(a) = mean_{C, a_m=a} G``. Variant Q:
      ``A^S_n = Q̂(a_n) − V̂`` (0 for singletons and for clusters where every member took the same action);
      variant R: ``A^S_n = G_n − mean{G_m : a_m ≠ a_n}``, or ``G_n − V̂`` when no member took another action.
      ``mean_std_norm`` divides by ``std_u,C(G) + eps`` (std 1 for a singleton).

    Q̂ − V̂ is a critic-free estimate of ``Q(s,a) − V(s)`` over behaviourally similar states, and clustering
    on hidden states fills the singleton anchor groups that exact hashing leaves. The paper's abstract gives
    only the ideas (hidden-state cosine clustering, action-conditioned peer baselines, the Q-style estimate,
    a drop-in for GiGPO); our choices are the leader clustering, ``tau_d``, the exact-anchor pre-merge, the
    hidden layer and position, the centring and the exact form of variant R. Centring: a decoder's hidden
    states share one dominant direction (on the shipped TextGrid run the mean of the unit vectors has norm
    0.99 and the median cosine distance between two steps of a task is 0.0009), so uncentred cosine puts a
    whole task in one cluster at any ``tau_d`` ≤ 0.5; what tells two steps of one task apart is how each
    departs from the task's mean state: clusters of the centred vectors (about 6.5 a task) hold returns whose
    spread is 0.7-0.75 of the task's (``bipace/return_var_ratio``; exact anchor groups: 0.6). The clustering
    loops over the atom rank inside a group (sequential by nature; all groups advance together), everything
    else is vectorized.
    With hidden states orthogonal across anchors and distinct actions per row this is GiGPO. Paper:
    "BiPACE: Bisimulation-Guided Policy Optimization with Action Counterfactual Estimation" (arXiv:2606.25556).
    Diagnostics: ``bipace/clusters``, ``bipace/clusters_per_task``, ``bipace/cluster_size_mean``,
    ``bipace/singleton_frac`` (share of clusters with one step), ``bipace/exact_singleton_frac`` (the same share
    for exact anchor groups, for comparison), ``bipace/return_var_ratio`` (mean squared deviation of the
    returns-to-go from their cluster's mean over that from their task group's: below 1 when the clusters
    follow states that differ in value) and ``bipace/step_adv_abs_mean``.
    """

    paper = "BiPACE: Bisimulation-Guided Policy Optimization with Action Counterfactual Estimation (arXiv:2606.25556)"
    provenance = "RECONSTRUCTED"
    requires: ClassVar[frozenset[str]] = frozenset(BIPACE_INPUTS)

    # gamma, step_advantage_w (here the weight of the PACE step term), mode, stats_over, eps and needs() are
    # GiGPO's.
    tau_d: float = Field(default=0.10, ge=0, le=2)
    """Cosine-distance threshold of the leader clustering: an atom joins its nearest cluster if 1 − cos ≤ tau_d."""
    merge_exact_obs_first: bool = True
    """Merge the rows of equal anchor ids into one atom before clustering (else every row is its own atom)."""
    variant: Literal["Q", "R"] = "Q"
    """PACE_Q (same-action peer mean minus cluster mean) or PACE_R (own return minus other-action peer mean)."""
    centre: bool = True
    """Cluster the hidden states' departures from their task group's mean (else the raw states, which share
    one dominant direction: a task then collapses into one cluster)."""

    def __call__(self, batch: RolloutBatch) -> AdvantageResult:
        mask = batch.mask
        who = "advantage bipace"
        reward, inputs, mode, a_ep = self.episode_term(batch, who, skip=frozenset({"context_hidden"}))
        group = batch.group
        if self.step_advantage_w == 0:
            return AdvantageResult(a_ep[:, None] * mask)
        traj, step, anchor = inputs["traj"], inputs["step"], inputs["anchor"]
        returns = discounted_returns(inputs["step_reward"].to(reward), traj, step, self.gamma)  # checks steps
        u = unit_hidden(batch, who, self.centre)
        cluster = bigpo_clusters(u, group, traj, step, anchor, self.tau_d, self.merge_exact_obs_first)
        a_step = pace_advantage(returns, cluster.to(group.device), inputs["action_key"], self.variant, mode, self.eps)
        adv = a_ep + self.step_advantage_w * a_step
        size = torch.bincount(cluster).double()
        exact = torch.unique(torch.stack([group.long(), anchor.long()], 1), dim=0, return_counts=True)[1]
        spread = [float((returns - group_moments(returns, ids, singleton="self_mean")[0]).square().mean())
                  for ids in (cluster.to(group.device), group)]
        diagnostics = {
            "bipace/clusters": float(len(size)),
            "bipace/clusters_per_task": len(size) / max(int(torch.unique(group).numel()), 1),
            "bipace/return_var_ratio": spread[0] / spread[1] if spread[1] > 0 else 1.0,
            "bipace/cluster_size_mean": float(size.mean()) if len(size) else 0.0,
            "bipace/singleton_frac": float((size == 1).double().mean()) if len(size) else 0.0,
            "bipace/exact_singleton_frac": float((exact == 1).double().mean()) if len(exact) else 0.0,
            "bipace/step_adv_abs_mean": float(a_step.abs().mean()) if len(a_step) else 0.0,
        }
        return AdvantageResult(adv[:, None] * mask, diagnostics=diagnostics)
