"""Advantage estimators; importing this package registers them all in ``ADVANTAGES``."""
from polo.core.advantages.base import AdvantageEstimator, AdvantageResult, SequenceAdvantage, TokenRewardAdvantage
from polo.core.advantages.gae import GAE, gae
from polo.core.advantages.group import GRPO, RLOO, DrGRPO
from polo.core.advantages.reinforce_pp import ReinforcePP, ReinforcePPBaseline
from polo.core.advantages import (  # noqa: F401  (registers)
    appo, bipace, cipo, g2po, gigpo, gpg, grpo_passk, himpo, iapo, igpo, info_gae, infopo, mapo, mc_grpo, ngrpo,
    oblr_weighted_baseline, opo, opo_observation, optimal_token_baseline, planpo, poise, redippo, reflectpo, remax, sopo,
    spo,
)
from polo.core.advantages import gdpo, verpo_tests, vpo  # noqa: F401  (registers)
from polo.core.advantages import dagrpo, gcpo, vulpo  # noqa: F401  (registers)
from polo.core.advantages import prime  # noqa: F401  (registers)
from polo.core.advantages import srpo  # noqa: F401  (registers)
from polo.core.advantages import didpo  # noqa: F401  (registers)
from polo.core.advantages import vspo  # noqa: F401  (registers)
from polo.core.advantages import lambdamix  # noqa: F401  (registers)
from polo.core.advantages import fgrpo, p2tpo  # noqa: F401  (registers)

__all__ = [
    "GAE", "GRPO", "RLOO", "AdvantageEstimator", "AdvantageResult", "DrGRPO", "ReinforcePP",
    "ReinforcePPBaseline", "SequenceAdvantage", "TokenRewardAdvantage", "gae",
]
