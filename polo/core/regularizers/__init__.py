"""Regularizers: loss terms beside the policy loss (distillation, evidence channels, ...) in ``REGULARIZERS``."""
from polo.core.regularizers.base import Regularizer
from polo.core.regularizers import guided_nll  # noqa: F401  (registers)
from polo.core.regularizers import distill, self_distill, verpo_evidence  # noqa: F401  (registers)

__all__ = ["Regularizer"]
