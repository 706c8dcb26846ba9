"""``dist.fsdp``: the sharded learner's settings (polo.dist.fsdp), importable without torch.distributed."""
from __future__ import annotations

from typing import Literal

from polo.core.registry import Settings


class FSDPSettings(Settings):
    """``dist.fsdp``: how ``dist.shard: fsdp`` shards (docs/scaling.md)."""

    mixed_precision: Literal["auto", "bf16", "none"] = "auto"
    """``bf16``: layers compute in bfloat16 from all-gathered bfloat16 copies of the float32 shards, gradients
    reduced in float32 (``MixedPrecisionPolicy``); ``none``: float32 throughout; ``auto``: bf16 on CUDA, none on
    the CPU."""
    cpu_offload: bool = False
    """Keep the shards, their gradients and the optimizer step on the CPU, copied to the GPU layer by layer
    (``CPUOffloadPolicy``): the largest models at the cost of host-device traffic. CUDA only."""
    reshard_after_forward: bool = True
    """Free each layer's gathered weights after its forward and gather them again for the backward (ZeRO-3);
    False keeps them to the backward (ZeRO-2: less communication, more memory)."""
