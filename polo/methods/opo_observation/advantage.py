"""OPO (observation policy optimization) on step rows: the trajectory's GRPO outcome advantage, plus a sibling
advantage from a local evidence score written only onto the argument tokens of observation actions; and the
host-side helpers an engine uses to pick the observation events it branches at."""
from __future__ import annotations

import math
import re
from typing import ClassVar, Sequence

import torch
from pydantic import Field
from torch import Tensor

from polo.core.advantages.base import AdvantageEstimator, AdvantageResult
from polo.core.advantages.episode_terms import episode_advantage
from polo.core.advantages.step_inputs import (binary_input, constant_per, episode_reward, step_input, trajectories,
                                             trajectory_length)
from polo.core.agent_primitives import group_norm
from polo.core.batch import RolloutBatch
from polo.core.registry import ADVANTAGES
from polo.core.segment import segment_sum

OPO_INPUTS = ("traj", "branch", "sibling", "ev", "arg_start")
_SPLIT = re.compile(r"[\W_]+")


def _arg_tokens(arg: str) -> frozenset[str]:
    """The normalized token set of an argument: lower-cased, split on whitespace and punctuation."""
    return frozenset(t for t in _SPLIT.split(arg.lower()) if t)


def jaccard_redundancy(args: Sequence[str]) -> list[float]:
    """Redundancy of each observation argument of one trajectory, in turn order: the largest Jaccard overlap
    ``|A ∩ B| / |A ∪ B|`` of its normalized token set with the token set of any earlier argument (0.0 for the
    first). Tokens are the lower-cased pieces between whitespace and punctuation; two arguments with the same
    token set (identical ones included, even when neither has a token) overlap 1.0. Pairwise string work over
    one trajectory's handful of events, so a plain loop."""
    sets = [_arg_tokens(a) for a in args]
    out: list[float] = []
    for i, cur in enumerate(sets):
        best = 0.0
        for prev in sets[:i]:
            union = cur | prev
            best = max(best, len(cur & prev) / len(union) if union else 1.0)
        out.append(best)
    return out


def select_events(uncertainty: Sequence[float], redundancy: Sequence[float], tau_u: float = 1.0,
                  tau_r: float = 0.5, k: int = 1) -> list[int]:
    """Indices of the observation events to branch at, highest priority first: an event is eligible when its
    uncertainty ``u ≥ tau_u`` (mean token entropy of its argument, nats) and its redundancy ``red ≤ tau_r``;
    eligible events are ranked by ``u·(1 − red)`` (equal priorities: the earlier event first) and the first
    ``k`` are kept."""
    if len(uncertainty) != len(redundancy):
        raise ValueError(f"select_events: {len(uncertainty)} uncertainties but {len(redundancy)} redundancies")
    if k < 0:
        raise ValueError(f"select_events: k must be ≥ 0, got {k}")
    if not all(math.isfinite(float(v)) for v in [*uncertainty, *redundancy]):
        raise ValueError("select_events: uncertainties and redundancies must be finite")
    eligible = [i for i, (u, r) in enumerate(zip(uncertainty, redundancy)) if u >= tau_u and r <= tau_r]
    eligible.sort(key=lambda i: (-uncertainty[i] * (1.0 - redundancy[i]), i))
    return eligible[:k]


@ADVANTAGES.register("opo_observation")
class OPOObservation(AdvantageEstimator):
    """Trajectory credit on every action token, plus sibling-branch credit on observation-argument tokens only.

    Rows: one per (trajectory, turn), plus sibling rows. For an observation event (a turn whose action fetches
    information, e.g. a search call) the engine re-samples alternative actions from the same context, runs each
    for that one step and scores the observation it returns with a local evidence score ``ev``; each such
    sibling is a row of its own (``sibling = 1``, a traj id of its own, one row), sharing the ``branch`` id of
    the original event row (``branch = -1`` on rows in no sibling group).

    * Trajectory term: ``A^traj_i = (R_i − mean_g R) / (std_u,g R + eps)``, one value per trajectory of task
      group g (``batch.group``), over the full trajectories only: sibling rows stay out of the statistics and
      get no trajectory term. A one-trajectory group has mean 0, std 1.
    * Sibling term, in branch group b (the original row and its siblings):
      ``A^sib_m = (ev_m − mean_b ev) / (std_u,b ev + eps)``; all-equal ``ev`` (or a group with no sibling)
      gives 0.
    * Tokens: a full-trajectory row gets ``A^traj`` on all its response tokens, and additionally
      ``lam·A^sib`` on its argument tokens if it is an event row; a sibling row gets ``lam·A^sib`` on its
      argument tokens and 0 elsewhere. The argument tokens of a row are its response tokens at positions
      ``≥ arg_start`` (the action's prefix, e.g. ``s:``, comes before).

    Thus where the agent chose to look is judged by what that look found, separately from whether the episode
    ended well. Choosing the events to branch at (uncertainty ≥ tau_u, redundancy ≤ tau_r, top K by
    ``u·(1 − red)``) is the engine's, with ``select_events`` and ``jaccard_redundancy`` of this module. Our
    design choices (the paper's method was reconstructed from its abstract): the std_u z-score of the evidence
    score within a branch group, Jaccard redundancy over text tokens, adding the sibling term to the trajectory
    term with weight lam, and excluding siblings from the outcome statistics. Registered as
    ``opo_observation`` because ``opo`` names an unrelated optimal-baseline estimator. Vectorized over rows (no
    loop over trajectories or groups). Diagnostics: ``opo_observation/branch_groups``,
    ``opo_observation/sibling_frac`` (share of rows that are siblings), ``opo_observation/branch_flat_frac``
    (share of branch groups whose ``ev`` are all equal, hence no signal), ``opo_observation/informative_groups``
    (branch groups whose ``ev`` differ: the ones whose sibling advantage is not 0) and
    ``opo_observation/sib_adv_abs_mean`` (over rows in branch groups).
    """

    paper = "Learning Where to Look (OPO, Observation Policy Optimization; arXiv id not found)"
    provenance = "RECONSTRUCTED"
    requires: ClassVar[frozenset[str]] = frozenset(OPO_INPUTS)

    lam: float = Field(default=1.0, ge=0)
    """Weight of the sibling (evidence) advantage on observation-argument tokens (0: trajectory term only)."""
    eps: float = Field(default=1e-6, gt=0)
    """Added to the unbiased std in both z-scores."""

    def needs(self) -> set[str]:
        return set(self.requires) if self.lam > 0 else {"traj", "sibling"}

    def __call__(self, batch: RolloutBatch) -> AdvantageResult:
        who = "advantage opo_observation"
        mask = batch.mask
        reward = episode_reward(batch, who)
        inputs = {name: step_input(batch, name, who) for name in sorted(self.needs())}
        traj = inputs["traj"]
        is_sib = binary_input(inputs["sibling"], "sibling", who)
        tinv, n_traj, _ = trajectories(traj, batch.group, who)
        if bool((trajectory_length(tinv, n_traj)[is_sib] != 1).any()):
            raise ValueError(f"{who}: a sibling row (sibling = 1) must carry a traj id of its own, shared with no "
                             "other row")
        full = (~is_sib).nonzero().squeeze(1)
        a_traj = torch.zeros_like(reward)
        if full.numel():
            a_traj[full] = episode_advantage(reward[full], batch.group[full], traj[full], "mean_std",
                                             "trajectories", self.eps, who)
        adv = a_traj[:, None] * mask
        diagnostics = {"opo_observation/sibling_frac": float(is_sib.double().mean()) if len(is_sib) else 0.0}
        if self.lam > 0:
            a_sib, branch_diag = self._sibling_advantage(batch, inputs, is_sib, who)
            arg_start = inputs["arg_start"]
            if bool((arg_start < 0).any()):
                raise ValueError(f"{who}: the input 'arg_start' must be ≥ 0 (response tokens before the argument)")
            positions = torch.arange(mask.shape[1], device=mask.device)
            arg_mask = mask * (positions[None, :] >= arg_start[:, None]).to(mask)
            adv = adv + self.lam * a_sib[:, None] * arg_mask
            diagnostics.update(branch_diag)
        return AdvantageResult(adv, diagnostics=diagnostics)

    def _sibling_advantage(self, batch: RolloutBatch, inputs: dict[str, Tensor], is_sib: Tensor,
                           who: str) -> tuple[Tensor, dict[str, float]]:
        """``A^sib`` per row (0 outside branch groups) and the branch diagnostics; checks the branch layout."""
        branch, ev = inputs["branch"], inputs["ev"].to(batch.mask)
        if bool((branch < -1).any()):
            raise ValueError(f"{who}: the input 'branch' must be a sibling-group id ≥ 0, or -1 for no group")
        member = branch >= 0
        if bool((is_sib & ~member).any()):
            raise ValueError(f"{who}: a sibling row (sibling = 1) must carry the branch id of its event (≥ 0)")
        _, binv = torch.unique(torch.where(member, branch, -1), return_inverse=True)
        n_b = int(binv.max()) + 1 if binv.numel() else 0
        originals = segment_sum((member & ~is_sib).long(), binv, n_b)
        size = segment_sum(member.long(), binv, n_b)
        real = size > 0  # the id -1 collects the rows in no group; it is no branch group
        if bool((originals[real] != 1).any()):
            raise ValueError(f"{who}: every branch group needs exactly one original event row (sibling = 0) "
                             "besides its siblings")
        if not bool(constant_per(batch.group.long(), binv, n_b)[real].all()):
            raise ValueError(f"{who}: a branch group spans several task groups (batch.group); siblings belong "
                             "to the task of their original event")
        a_sib = group_norm(ev, binv, "mean_std", singleton="self_mean", eps=self.eps, members=member)
        a_sib = torch.where(member, a_sib, 0.0)
        ev_hi = ev.new_full((n_b,), -torch.inf).scatter_reduce(0, binv, torch.where(member, ev, -torch.inf), "amax")
        ev_lo = ev.new_full((n_b,), torch.inf).scatter_reduce(0, binv, torch.where(member, ev, torch.inf), "amin")
        n_groups = int(real.sum())
        diag = {
            "opo_observation/branch_groups": float(n_groups),
            "opo_observation/branch_flat_frac": float((ev_hi == ev_lo)[real].double().mean()) if n_groups else 0.0,
            "opo_observation/informative_groups": float((ev_hi > ev_lo)[real].sum()),
            "opo_observation/sib_adv_abs_mean": float(a_sib[member].abs().mean()) if bool(member.any()) else 0.0,
        }
        return a_sib, diag
