"""The image contract of an ``Example``: how a task hands a picture to the vision policy.

A prompt that shows a picture carries the placeholder ``IMAGE_TOKEN`` in its text, where the picture goes, and
the picture itself in its column ``IMAGE_COLUMN``: ``encode_image``'s bytes of a uint8 RGB array ``[H, W, 3]``,
row-major (hashable and compact, so a split can hash it). The tasks write this (polo.tasks.shapes); the vision
policy (polo.policy.vision) expands the placeholder into its image tokens and decodes the bytes into
``pixel_values``.
"""
from __future__ import annotations

import numpy as np

IMAGE_TOKEN = "<image>"
"""The placeholder a prompt's text carries where its picture goes (LLaVA's)."""
IMAGE_COLUMN = "image"
"""The Example column holding the picture (``encode_image``'s bytes)."""


def encode_image(pixels: np.ndarray) -> bytes:
    """An RGB picture ``[H, W, 3]`` of uint8 as an Example column: its row-major bytes (hashable, compact)."""
    if pixels.ndim != 3 or pixels.shape[2] != 3 or pixels.dtype != np.uint8:
        raise ValueError(f"encode_image: expected a uint8 array [H, W, 3], got {pixels.dtype} {list(pixels.shape)}")
    return np.ascontiguousarray(pixels).tobytes()
