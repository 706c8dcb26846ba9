"""The epoch × minibatch update every control method that learns from a rollout batch shares.

``epochs`` passes over the batch's ``n`` rows, each in a fresh random order drawn from the method's generator
(``torch.randperm``), cut into minibatches of ``max(1, n // minibatches)`` rows (a remainder shorter than that is
left out of the pass); each minibatch is one optimizer step whose gradient's global norm is clipped. The
returned metrics are the means over every minibatch stepped.
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

Stats = dict[str, float]


def clipped_step(optimizer: torch.optim.Optimizer, params: list[Tensor], loss: Tensor, max_norm: float) -> float:
    """One optimizer step on ``loss``: clear the gradients, backpropagate, clip the global gradient norm of
    ``params`` to ``max_norm``, step; returns the norm before clipping."""
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
    optimizer.step()
    return float(grad_norm)


def minibatch_epochs(policy: torch.nn.Module, n: int, epochs: int, minibatches: int, generator: torch.Generator,
                     step: Callable[[Tensor], Stats],
                     after_epoch: Callable[[Stats, Stats], bool] | None = None) -> Stats:
    """Run ``step(rows)`` (the rows' indices, one minibatch) over ``epochs`` shuffled passes with ``policy`` in
    training mode, then end the policy's update and put it back in evaluation mode.

    ``after_epoch(means, last)`` is called after each pass with the means so far and the last minibatch's stats;
    it may adjust the optimizer, and returning True ends the update early (a KL target). Returns the means of
    every stat over all the minibatches stepped."""
    size = max(1, n // minibatches)
    sums: Stats = {}
    count = 0
    policy.train()
    for _ in range(epochs):
        order = torch.randperm(n, generator=generator)
        for start in range(0, n - size + 1, size):
            last = step(order[start:start + size])
            count += 1
            for key, value in last.items():
                sums[key] = sums.get(key, 0.0) + value
        if after_epoch is not None and after_epoch({k: v / count for k, v in sums.items()}, last):
            break
    policy.end_update()
    policy.eval()
    return {k: v / max(count, 1) for k, v in sums.items()}
