"""CIPO's counterfactual imagination: each root episode's first tool-granularity decision replayed with the other
choice and finished by the policy (``tree: {name: cipo}``; the ``cipo`` advantage reads ``cf_delta``).

Per root episode, the first turn t* whose action has an alternative at the other tool granularity in the state
it was taken in (``env.alternative``: ``s2:x`` ↔ ``s:x``) is replayed with that alternative in a fresh
environment and the policy plays the episode to its end; ``cf_delta`` = R − R^cf and ``cf_decision`` = 1 go on
row t*. The replays are not rows (they only score the decision).
"""
from __future__ import annotations

import torch

from polo.engines.branches import BRANCHERS, Brancher, Player
from polo.engines.episodes import Episode, Tree

COUNTERFACTUAL_TRAJ = 10**9
"""Trajectory ids of counterfactual replays (never rows) start here, clear of the batch's own ids."""


@BRANCHERS.register("cipo")
class CounterfactualReplays(Brancher):
    """A replay of each episode's first tool-granularity decision with the other choice; scores it, not trained."""

    paper = "Counterfactual Imagination Policy Optimization (CIPO; arXiv id not found)"
    provenance = "RECONSTRUCTED"
    writes = {"cf_decision": 0.0, "cf_delta": 0.0}
    engine_keys = {"counterfactuals": None}

    def grow(self, engine: Player, policy, tree: Tree, generator: torch.Generator) -> None:
        """Play the replays; write ``cf_decision`` and ``cf_delta`` on each decision row."""
        task, replays, decisions = engine.settings.task, [], []
        for ep in tree.roots:
            for t, (action, _) in enumerate(ep.history):
                alternative = Episode.branch(task.make_env(), ep, t, -1).env.alternative(action)
                if alternative is not None:
                    replays.append(Episode.branch(task.make_env(), ep, t + 1, COUNTERFACTUAL_TRAJ + len(replays),
                                                  replace_last=alternative))
                    decisions.append((ep, t))
                    break
        engine.play(policy, replays, generator, greedy=False)
        for (ep, t), replay in zip(decisions, replays):
            tree.extras.setdefault(ep.traj, {}).update({f"cf_decision@{t}": 1.0,
                                                        f"cf_delta@{t}": ep.episode_return - replay.episode_return})
