"""DiDPO: GiGPO's episode advantage plus a diff-level advantage on the tokens of recurring code sub-diffs.

Also home of ``groupability_score`` (the anchor score the host-side anchor mining selects by) and
``diff_advantage`` (the anchor-group baselines and the token fill)."""
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

GsForm = Literal["saturating", "log", "linear"]
GS_FORMS = ("saturating", "log", "linear")
DIFF_INPUTS = {
    "diff_anchor": "[N, K] anchor id of each sub-diff occurrence of the row (ids ≥ 1, unique per task group; 0 = "
                   "an empty slot)",
    "diff_lines": "[N, K] size of each occurrence in changed lines",
    "diff_span": "[N, K, 2] response columns [start, end) of the tokens that wrote each occurrence",
}


def groupability_score(size: Tensor, count: Tensor, form: str = "saturating", s0: float = 8.0,
                       g0: float = 8.0) -> Tensor:
    """``GS(s, n) = φ(s)·ψ(n)`` elementwise: a shared change scores higher the larger it is (mean size ``s`` in
    lines) and the more distinct rows share it (support ``n``); ``ψ(n) = 0`` for ``n < 2``.

    ``saturating`` (default): ``φ(s) = 1 − exp(−s/s0)``, ``ψ(n) = 1 − exp(−(n−1)/g0)``; ``log``:
    ``φ(s) = min(1, log1p(s)/log1p(s0))``, ``ψ(n) = min(1, log n / log max(2, g0))``; ``linear``:
    ``φ(s) = min(1, s/s0)``, ``ψ(n) = min(1, (n−1)/(g0−1))`` (``g0 > 1``). Sizes below 0 count as 0.
    """
    if form not in GS_FORMS:
        raise ValueError(f"groupability_score: unknown form {form!r}; expected one of {', '.join(GS_FORMS)}")
    if s0 <= 0 or g0 <= 0 or (form == "linear" and g0 <= 1):
        raise ValueError(f"groupability_score: s0 and g0 must be > 0 (g0 > 1 for the linear form), got s0={s0}, "
                         f"g0={g0}")
    s = size.double().clamp_min(0)
    n = count.double()
    if form == "saturating":
        phi, psi = 1 - torch.exp(-s / s0), 1 - torch.exp(-(n - 1).clamp_min(0) / g0)
    elif form == "log":
        phi = (torch.log1p(s) / torch.log1p(torch.tensor(float(s0), dtype=torch.float64))).clamp_max(1)
        psi = (torch.log(n.clamp_min(1)) / torch.log(torch.tensor(max(2.0, g0), dtype=torch.float64))).clamp_max(1)
    else:
        phi, psi = (s / s0).clamp_max(1), ((n - 1) / (g0 - 1)).clamp(0, 1)
    return phi * torch.where(n >= 2, psi, 0.0)


def diff_inputs(batch: RolloutBatch, who: str) -> tuple[Tensor, Tensor, Tensor]:
    """The checked ``diff_anchor`` ``[N, K]`` (integer), ``diff_lines`` ``[N, K]`` (finite, ≥ 0) and
    ``diff_span`` ``[N, K, 2]`` (integer) inputs; ValueError naming ``who`` and the input otherwise."""
    N = batch.batch_size
    values = {}
    for name, meaning in DIFF_INPUTS.items():
        where = f"{who} needs the input {name!r} ({meaning}), written by the diff_anchor provider"
        value = batch.require(name, where)
        if value.dim() != (3 if name == "diff_span" else 2) or value.shape[0] != N:
            raise ValueError(f"{where}; got shape {tuple(value.shape)} for {N} rows")
        if name == "diff_lines":
            if not bool((torch.isfinite(value.double()) & (value >= 0)).all()):
                raise ValueError(f"{where}; it holds negative or non-finite sizes")
        elif value.is_floating_point() or value.dtype == torch.bool:
            raise ValueError(f"{where}; got dtype {value.dtype}, expected an integer dtype")
        values[name] = value
    anchor, lines, span = values["diff_anchor"], values["diff_lines"], values["diff_span"]
    if lines.shape != anchor.shape or span.shape != (*anchor.shape, 2):
        raise ValueError(f"{who}: diff_anchor {tuple(anchor.shape)}, diff_lines {tuple(lines.shape)} and diff_span "
                         f"{tuple(span.shape)} must be [N, K], [N, K] and [N, K, 2] with the same K")
    return anchor.long(), lines, span.long()


def diff_advantage(returns: Tensor, group: Tensor, anchor: Tensor, lines: Tensor, span: Tensor, width: int,
                   mode: str, form: str, s0: float, g0: float, gs_min: float,
                   eps: float) -> tuple[Tensor, Tensor, dict[str, float]]:
    """``(A^D per token [N, width], covered [N, width] bool, diagnostics)``.

    Occurrences with equal ``(group, anchor)`` form an anchor group a, with support ``n_a`` (its occurrences;
    the provider writes at most one per row) and mean size ``s_a`` (``lines``); ``GS_a =
    groupability_score(s_a, n_a)``. An occurrence in row i gets ``A^D = G_i − mean_a G`` (``mode="mean"``) or
    ``(G_i − mean_a G)/(std_p,a G + eps)`` (``"mean_std"``, population std; a one-member group has std 1 and
    its own value as mean, so 0). Each token takes the ``A^D`` of the covering occurrence (``span``: response
    columns [start, end)) with the highest ``GS`` (the first slot among equals), ignoring occurrences with
    ``GS ≤ gs_min``; an uncovered token gets 0. Vectorized: a ``[N, K, width]`` coverage, max over K."""
    N, K = anchor.shape
    valid = anchor > 0
    row = torch.arange(N, device=anchor.device)[:, None].expand(N, K)[valid]
    if not len(row):
        zeros = returns.new_zeros((N, width))
        return zeros, zeros.bool(), {"didpo/anchors": 0.0, "didpo/anchors_per_uid": 0.0,
                                     "didpo/anchor_support_mean": 0.0, "didpo/anchor_lines_mean": 0.0,
                                     "didpo/gs_mean": 0.0, "didpo/rows_with_anchor_frac": 0.0,
                                     "didpo/diff_adv_abs_mean": 0.0}
    cluster = torch.unique(torch.stack([group.long()[row], anchor[valid]], 1), dim=0, return_inverse=True)[1]
    n_groups = int(cluster.max()) + 1
    support = torch.bincount(cluster, minlength=n_groups).to(returns.dtype)
    size = returns.new_zeros(n_groups).index_add_(0, cluster, lines[valid].to(returns.dtype)) / support
    gs = groupability_score(size, support, form, s0, g0).to(returns.dtype)
    a_occ = group_norm(returns[row], cluster, mode, std_kind="population", singleton="self_mean", eps=eps)
    slot_gs = returns.new_full((N, K), -torch.inf).masked_scatter(valid, gs[cluster])
    slot_adv = returns.new_zeros((N, K)).masked_scatter(valid, a_occ)
    cols = torch.arange(width, device=anchor.device)
    cover = (valid & (slot_gs > gs_min))[..., None] & (cols >= span[..., :1]) & (cols < span[..., 1:])
    best = torch.where(cover, slot_gs[..., None], -torch.inf).max(1).indices
    covered = cover.any(1)
    a_tok = torch.where(covered, slot_adv.gather(1, best), 0.0)
    diagnostics = {
        "didpo/anchors": float(n_groups),
        "didpo/anchors_per_uid": n_groups / int(torch.unique(group).numel()),
        "didpo/anchor_support_mean": float(support.mean()),
        "didpo/anchor_lines_mean": float(size.mean()),
        "didpo/gs_mean": float(gs.mean()),
        "didpo/rows_with_anchor_frac": float(valid.any(1).double().mean()),
        "didpo/diff_adv_abs_mean": float(a_occ.abs().mean()),
    }
    return a_tok, covered, diagnostics


@ADVANTAGES.register("didpo")
class DiDPO(AdvantageEstimator):
    """``A = (A^E + λ·A^D_token) · mask`` on step rows (one row per turn of a coding agent).

    Episode level: GiGPO's ``A^E_n = R_n − mean(S_g)`` (``mean_norm``) or ``(R_n − mean(S_g))/(std_u(S_g) +
    eps)`` (``mean_std_norm``) over every step row of the task group g, ``R_n`` the episode reward written on the
    row. Diff level: a step's code change is split into sub-diffs (changed line ranges); sub-diffs that recur,
    equal or similar, across the rollouts of one task are *anchors* (mined on the host by the ``diff_anchor``
    input provider and chosen by their groupability score ``GS(s, n) = φ(s)·ψ(n)``, default ``φ(s) = 1 −
    exp(−s/s0)``, ``ψ(n) = 1 − exp(−(n−1)/g0)``, ``s`` the mean size in lines and ``n`` the rows sharing it).
    With ``G_n = Σ_{k≥t} γ^{k−t} r_k`` the return-to-go of the row (``r`` = ``step_reward``), an occurrence of
    anchor a in row n gets ``A^D = G_n − mean_a G`` (``mean_norm``) or divided by the population std of the
    anchor's returns plus eps (``mean_std_norm``; 1 for a one-member anchor). Each response token takes the
    ``A^D`` of the covering occurrence with the highest ``GS`` (occurrences with ``GS ≤ gs_min`` ignored), 0 when
    none covers it; λ = ``snippet_advantage_w``.

    So the tokens that wrote a shared change are compared with the other rollouts that made that change (or a
    near-identical one at the same place), while every other token keeps the episode comparison. Inputs:
    ``traj``, ``step``, ``step_reward`` ``[N]`` (multi-turn engine) and ``diff_anchor``, ``diff_lines``,
    ``diff_span`` (the ``diff_anchor`` provider, which reads the anchor-mining settings ``sim_thresh``,
    ``min_block_lines``, ``max_pairs_per_uid``, ``max_anchors_per_uid``, ``overhead_mode``, ``s0``, ``g0`` and
    ``gs_form`` from this component). Formulas follow the authors' ``didpo/core_didpo.py`` (DiDPO, "Diff-in-Diff
    Policy Optimization"). Diagnostics: ``didpo/anchors``, ``didpo/anchors_per_uid``,
    ``didpo/anchor_support_mean``, ``didpo/anchor_lines_mean``, ``didpo/gs_mean``, ``didpo/rows_with_anchor_frac``,
    ``didpo/covered_token_frac`` (share of trained tokens an anchor covers) and ``didpo/diff_adv_abs_mean``.
    """

    paper = "DiDPO: Diff-in-Diff Policy Optimization for coding agents (arXiv id not found)"
    provenance = "CODE"
    requires: ClassVar[frozenset[str]] = frozenset({"traj", "step", "step_reward", *DIFF_INPUTS})

    gamma: float = Field(default=0.95, ge=0, le=1)
    """Discount of the step rewards in the return-to-go G the diff level compares."""
    snippet_advantage_w: float = Field(default=1.0, ge=0)
    """Weight λ of the diff-level advantage (0: GiGPO's episode term alone)."""
    mode: Literal["mean_norm", "mean_std_norm"] = "mean_norm"
    """Both levels: subtract the group mean, or also divide by its std (episode: unbiased; anchor: population)."""
    eps: float = Field(default=1e-6, gt=0)
    """Added to the std in mean_std_norm."""
    gs_form: GsForm = "saturating"
    """Shape of φ and ψ in the groupability score."""
    s0: float = Field(default=8.0, gt=0)
    """Size scale of φ, in lines."""
    g0: float = Field(default=8.0, gt=0)
    """Support scale of ψ, in rows (> 1 for the linear form)."""
    gs_min: float = Field(default=0.0, ge=0)
    """Occurrences of anchors with GS at or below this are ignored by the token fill."""
    sim_thresh: float = Field(default=0.8, ge=0, le=1)
    """difflib similarity at which replaced blocks match and buckets merge (anchor mining)."""
    min_block_lines: int = Field(default=1, ge=1)
    """Shortest equal (or replaced) block of lines the pairwise matching keeps."""
    max_pairs_per_uid: int = Field(default=64, ge=0)
    """Pairwise matchings per task group (the lightweight mode caps it at 8; exact_only at 0)."""
    max_anchors_per_uid: int = Field(default=64, ge=1)
    """Anchors the greedy selection keeps per task group."""
    overhead_mode: Literal["exact_only", "lightweight", "full"] = "lightweight"
    """exact_only: exact buckets only; lightweight: ≤ 8 pairs, fallback when nothing aligned; full: always."""

    def model_post_init(self, context) -> None:
        if self.gs_form == "linear" and self.g0 <= 1:
            raise ValueError(f"advantage didpo: g0={self.g0} with gs_form linear; expected g0 > 1")

    def needs(self) -> set[str]:
        return set(self.requires) if self.snippet_advantage_w > 0 else set()

    def __call__(self, batch: RolloutBatch) -> AdvantageResult:
        who = "advantage didpo"
        mask = batch.mask
        reward = episode_reward(batch, who)
        mode = "mean_std" if self.mode == "mean_std_norm" else "mean"
        a_ep = episode_advantage(reward, batch.group, None, mode, "steps", self.eps, who)
        if self.snippet_advantage_w == 0:
            return AdvantageResult(a_ep[:, None] * mask)
        traj, step, step_reward = (step_input(batch, name, who) for name in ("traj", "step", "step_reward"))
        returns = discounted_returns(step_reward.to(reward), traj, step, self.gamma)
        anchor, lines, span = diff_inputs(batch, who)
        a_tok, covered, diagnostics = diff_advantage(returns, batch.group, anchor, lines, span, mask.shape[1], mode,
                                                     self.gs_form, self.s0, self.g0, self.gs_min, self.eps)
        diagnostics["didpo/covered_token_frac"] = float((covered & (mask > 0)).sum() / mask.sum().clamp_min(1))
        return AdvantageResult((a_ep[:, None] + self.snippet_advantage_w * a_tok) * mask, diagnostics=diagnostics)
