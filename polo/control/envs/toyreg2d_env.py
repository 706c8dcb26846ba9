"""``polo/ToyReg2D-v0``: one-step registration episodes on ToyReg2D pairs (``toyreg2d``), as a gymnasium env.

Observation: the (moving, fixed) image pair ``[2, H, W]``. Action: a displacement field ``[2, H, W]`` in
``grid_sample``'s normalised units (x then y). Reward: the gain in hard label Dice that warping the moving
label by the field brings. The episode ends after the one step; its info reports ``dice``, ``dice_gain`` and
``njd`` (the folding fraction), which PPO's evaluation averages into ``eval/*``. MorphSeek's training loop
draws whole batches from the generator instead, for speed.
"""
from __future__ import annotations

import numpy as np
import torch

from polo.control.envs.registration import gymnasium
from polo.control.envs.toyreg2d import toyreg2d_pairs
from polo.control.math.morphseek import folding_fraction, hard_dice, to_pixels, warp

gym = gymnasium()


class ToyReg2DEnv(gym.Env):
    """A fresh pair each episode, drawn from ``self.np_random`` (``reset(seed=...)`` makes it reproducible)."""

    metadata = {"render_modes": []}

    def __init__(self, size: int = 32):
        if size < 4 or size % 4:
            raise ValueError(f"ToyReg2D needs an image size that is a multiple of 4, got {size}")
        self.size = size
        self.observation_space = gym.spaces.Box(0.0, 1.0, (2, size, size), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (2, size, size), np.float32)
        self._pair = None

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        generator = torch.Generator().manual_seed(int(self.np_random.integers(2 ** 62)))
        self._pair = toyreg2d_pairs(1, generator, self.size)
        obs = torch.cat([self._pair.moving, self._pair.fixed], 1)[0].numpy()
        return obs, {"dice": float(hard_dice(self._pair.moving_label, self._pair.fixed_label)[0])}

    def step(self, action):
        if self._pair is None:
            raise RuntimeError("ToyReg2D: call reset() before step()")
        field = torch.as_tensor(np.asarray(action, dtype=np.float32)).reshape(1, 2, self.size, self.size)
        pair, self._pair = self._pair, None
        before = hard_dice(pair.moving_label, pair.fixed_label)[0]
        after = hard_dice(warp(pair.moving_label, field), pair.fixed_label)[0]
        obs = torch.cat([pair.moving, pair.fixed], 1)[0].numpy()
        info = {"dice": float(after), "dice_gain": float(after - before),
                "njd": float(folding_fraction(to_pixels(field))[0])}
        return obs, float(after - before), True, False, info
