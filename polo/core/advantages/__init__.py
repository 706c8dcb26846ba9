"""Advantage estimators; importing this package registers them all in ``ADVANTAGES``."""
from polo.core.advantages.base import AdvantageEstimator, AdvantageResult, SequenceAdvantage, TokenRewardAdvantage
from polo.core.advantages.gae import GAE, gae
from polo.core.advantages.group import GRPO, RLOO, DrGRPO
from polo.core.advantages.reinforce_pp import ReinforcePP, ReinforcePPBaseline
from polo.core.advantages import info_gae, mc_grpo, ngrpo, poise, redippo, spo, verl_baselines, weighted_baseline  # noqa: F401,E501  (registers)

__all__ = [
    "GAE", "GRPO", "RLOO", "AdvantageEstimator", "AdvantageResult", "DrGRPO", "ReinforcePP",
    "ReinforcePPBaseline", "SequenceAdvantage", "TokenRewardAdvantage", "gae",
]
