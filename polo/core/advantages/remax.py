"""ReMax: the reward of a greedy completion of the same prompt as the baseline."""
from __future__ import annotations

from polo.core.advantages.base import AdvantageEstimator, AdvantageResult
from polo.core.batch import RolloutBatch
from polo.core.registry import ADVANTAGES


@ADVANTAGES.register("remax")
class ReMax(AdvantageEstimator):
    """``A_i = R_i − R_greedy(x_i)``, broadcast over the response's valid tokens.

    R_greedy is the (weighted scalar) reward of the greedy decoding of the same prompt
    (``extras["greedy_reward"]`` ``[B]``): a baseline that costs one extra generation per prompt and needs
    neither a critic nor a group of samples. Matches verl's ``compute_remax_outcome_advantage``.
    """

    paper = ("ReMax: A Simple, Effective, and Efficient Reinforcement Learning Method for Aligning Large "
             "Language Models (arXiv:2310.10505)")
    provenance = "CODE"
    requires = frozenset({"greedy_reward"})

    def __call__(self, batch: RolloutBatch) -> AdvantageResult:
        mask = batch.mask
        adv = batch.scalar_reward().to(mask) - batch.extras["greedy_reward"].to(mask)
        return AdvantageResult(adv[:, None] * mask)
