"""Regularizers: loss terms beside the policy loss (distillation, evidence channels, ...) in ``REGULARIZERS``."""
from polo.core.regularizers.base import Regularizer

__all__ = ["Regularizer"]
