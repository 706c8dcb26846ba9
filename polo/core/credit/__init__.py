"""Token credit: redistribution of a response's advantage over its tokens (registered in ``CREDIT``)."""
from polo.core.credit.base import TokenCredit
from polo.core.credit import critic_discrepancy  # noqa: F401  (registers)
from polo.core.credit import dgpo_hellinger, rollout_is, top_entropy_quantile  # noqa: F401  (registers)
from polo.core.credit import cort  # noqa: F401  (registers)

__all__ = ["TokenCredit"]
