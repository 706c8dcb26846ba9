"""Token credit: redistribution of a response's advantage over its tokens (registered in ``CREDIT``)."""
from polo.core.credit.base import TokenCredit

__all__ = ["TokenCredit"]
