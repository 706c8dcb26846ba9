"""OPO: the length-weighted group mean as baseline (the optimal baseline when gradient norm ∝ length)."""
from __future__ import annotations

from typing import Literal

from polo.core.advantages.oblr_weighted_baseline import OBLRWeightedBaseline
from polo.core.registry import ADVANTAGES


@ADVANTAGES.register("opo")
class OPO(OBLRWeightedBaseline):
    """``b_g = Σ_{j∈g} |y_j|·R_j / Σ_{j∈g} |y_j|``, ``A_i = R_i − b_g``; a singleton group keeps ``A = R``.

    If each token contributes a score of roughly equal norm, ‖∇ log π(y)‖² grows with the length |y|, and the
    variance-minimizing baseline is the length-weighted mean reward of the group (``oblr_weighted_baseline``
    with ``proxy: length`` over the whole group). Matches verl's ``compute_opo_outcome_advantage``.
    """

    paper = "On-Policy RL with Optimal Reward Baseline (arXiv:2505.23585)"
    provenance = "CODE"

    proxy: Literal["logit_grad", "length"] = "length"
    leave_one_out: bool = False
