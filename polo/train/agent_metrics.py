"""Episode metrics of a multi-turn step (rows are steps; ``extras["traj"]`` says which episode each is).

Per episode, averaged over the step's episodes: ``agent/success`` (solved), ``agent/return`` (its return),
``agent/episode_length`` (turns); per turn, averaged over every turn of the step: ``agent/invalid_rate``
(actions the environment could not parse) and ``agent/tool_error_rate`` (tool calls that failed). Rows of
branches (``depth`` > 0: OPO's siblings) are not episodes of their own; with branches, ``agent/tree_size``
is the mean number of rows per tree (a root episode's turns plus its branches' rows). A batch of branches
only (RTPO's continuations) counts each branch as an episode. Written only
when the batch has step rows (the ``multi_turn`` engine); the anchor-group statistics come from the advantage
(``gigpo/*``).
"""
from __future__ import annotations

from typing import Any

import torch

from polo.core.segment import segment_sum
from polo.train.callbacks import Callback


def episode_metrics(extras: dict[str, torch.Tensor], returns: torch.Tensor) -> dict[str, float]:
    """The ``agent/*`` metrics of step rows with ``extras`` (``traj``, ``correct``, ``valid``, ``tool_error``) and
    ``returns`` ``[N]`` (each row's episode return; rows with ``depth`` > 0 are branch rows)."""
    depth = extras.get("depth")
    tree = {}
    if depth is not None and bool((depth > 0).any()) and bool((depth == 0).any()):
        roots = depth == 0
        tree = {"agent/tree_size": len(returns) / max(1, int(torch.unique(extras["traj"][roots]).numel()))}
        extras, returns = {k: v[roots] for k, v in extras.items()}, returns[roots]
    _, episode = torch.unique(extras["traj"], return_inverse=True)
    turns = segment_sum(torch.ones_like(returns), episode)
    rows = torch.arange(len(returns))
    one = torch.full((len(turns),), len(returns)).scatter_reduce(0, episode, rows, "amin")  # each episode's first row
    return {
        "agent/success": float(extras["correct"][one].float().mean()),
        "agent/return": float(returns[one].mean()),
        "agent/episode_length": float(turns.mean()),
        "agent/invalid_rate": float(1 - extras["valid"].float().mean()),
        "agent/tool_error_rate": float(extras["tool_error"].float().mean()),
        **tree,
    }


class AgentMetrics(Callback):
    """Adds the ``agent/*`` episode metrics to each step's row (multi-turn batches only)."""

    def on_step_end(self, trainer, row: dict[str, Any], rollouts) -> None:
        batch = rollouts.batch
        if "traj" in batch.extras:
            row.update(episode_metrics(batch.extras, batch.scalar_reward()))
