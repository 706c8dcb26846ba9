"""Sizes of gymnasium spaces, read without importing gymnasium."""
from __future__ import annotations

import math
from typing import Any


def flat_dim(space: Any) -> int:
    """Number of floats in a flattened observation of ``space`` (a Box: the product of its shape)."""
    shape = getattr(space, "shape", None)
    if shape is None:
        raise ValueError(f"expected a Box observation space with a shape, got {space}")
    return int(math.prod(shape))
