"""Size of the built-in vision-language model's image tower (``model.vision``, read by ``model.kind: vision``)."""
from __future__ import annotations

from pydantic import Field, model_validator

from polo.core.registry import Settings


class VisionTowerConfig(Settings):
    """A small ViT (CLIP vision tower): the image is cut into ``patch_size`` squares, each one image token."""

    image_size: int = Field(32, gt=0)
    """Side of the square input image, in pixels."""
    patch_size: int = Field(8, gt=0)
    """Side of a patch; (image_size / patch_size)² image tokens per image."""
    hidden_size: int = Field(64, gt=0)
    """Width of the image tower."""
    num_layers: int = Field(2, gt=0)
    """Transformer blocks of the image tower."""
    num_heads: int = Field(4, gt=0)
    """Attention heads of the image tower."""
    intermediate_size: int = Field(128, gt=0)
    """Width of the image tower's MLP."""

    @model_validator(mode="after")
    def _patches_tile_image(self) -> "VisionTowerConfig":
        if self.image_size % self.patch_size:
            raise ValueError(f"image_size={self.image_size} must be a multiple of patch_size={self.patch_size}")
        if self.hidden_size % self.num_heads:
            raise ValueError(f"hidden_size={self.hidden_size} must split into num_heads={self.num_heads} heads")
        return self

    @property
    def image_tokens(self) -> int:
        """Image tokens per image: ``(image_size / patch_size)²``."""
        return (self.image_size // self.patch_size) ** 2
