"""The ``reverse_turn`` engine: RTPO's sparse reverse tree, one turn level per training step.

"Reverse-Turn Policy Optimization" trains the turns of multi-turn episodes one level at a time, from the last
turn back to the first, so that every decision is judged by continuations of the *current* policy and is
trained in the exact context it was generated in. The engine keeps a *sweep*: G base episodes per task,
played once. Each ``rollout`` call serves the next level k (from the longest base episode's length K down
to 1): up to ``nodes_per_task`` base episodes per task that reach turn k are nodes; from each node's stored
state (the first k−1 turns replayed, the same context text and token ids the base episode had) the current
policy plays ``continuations`` episodes to the end. The rows are the continuations' turn-k actions only (the
turns after k score the decision but carry no loss), grouped by node, so ``advantage: grpo`` gives
``A_{n,m} = (R_{n,m} − mean_m R_{n,·}) / std_u``. The trainer then updates the policy, and the next call's
level k−1 continuations come from the updated policy; ``policy_version`` (the updates done when a row was
generated) records it. A new sweep starts once level 1 is served, with the step's tasks.

The sweep lives in memory: a resumed run starts a new sweep (its levels are steps of their own, so no
trained sample is lost or repeated).
"""
from __future__ import annotations

import torch
from pydantic import Field, PrivateAttr

from polo.engines.base import ENGINES, Rollouts
from polo.engines.episodes import Episode
from polo.engines.multi_turn import MultiTurn
from polo.tasks.base import Example


@ENGINES.register("reverse_turn")
class ReverseTurn(MultiTurn):
    """RTPO: per step, one turn level of a sweep from the last turn back to the first (see the module)."""

    provides = MultiTurn.provides | {"policy_version"}
    nodes_per_task: int = Field(2, ge=1)
    """B: base episodes per task whose state before turn k is branched at level k."""
    continuations: int = Field(4, ge=2)
    """M: continuations of the current policy per node; their turn-k actions are the level's rows."""

    _sweep: dict | None = PrivateAttr(None)
    _version: int = PrivateAttr(0)

    def sync(self, policy, version: int) -> None:
        super().sync(policy, version)  # vLLM's weight push
        self._version = version

    @property
    def level(self) -> int:
        """The 1-based turn level the next rollout serves (0: a new sweep starts)."""
        return 0 if self._sweep is None else self._sweep["level"]

    def rollout(self, policy, examples: list[Example], prompt_index: list[int], generator: torch.Generator, *,
                samples_per_prompt: int | None = None, greedy: bool = False) -> Rollouts:
        if self.level == 0:
            self._sweep = self._new_sweep(policy, examples, prompt_index, generator, samples_per_prompt)
        sweep, k = self._sweep, self._sweep["level"]
        task, next_traj, nodes, continuations, group_of = self.settings.task, 0, [], [], {}
        for g in range(len(sweep["examples"])):
            reaching = [ep for ep in sweep["episodes"][g] if len(ep.history) >= k]
            order = torch.randperm(len(reaching), generator=generator).tolist()
            for i in sorted(order[: self.nodes_per_task]):
                node = len(nodes)
                nodes.append(g)
                for _ in range(self.continuations):
                    continuations.append(Episode.branch(task.make_env(), reaching[i], k - 1, next_traj))
                    group_of[next_traj] = node
                    next_traj += 1
        calls = self.play(policy, continuations, generator, greedy)
        # every continuation starts at turn k, so the first decoding call holds exactly the level's rows
        rows = self.step_rows(calls[:1], continuations, group_of, [sweep["examples"][g] for g in nodes],
                              [sweep["prompt_index"][g] for g in nodes], {})
        rows.batch.extras["policy_version"] = torch.full((rows.batch.batch_size,), self._version, dtype=torch.long)
        sweep["level"] = k - 1
        return rows

    def _new_sweep(self, policy, examples, prompt_index, generator, samples_per_prompt) -> dict:
        """G base episodes per task, played by the current policy; the sweep starts at their longest length."""
        G = samples_per_prompt or self.settings.samples_per_prompt
        seeds = [e.columns["seed"] for e in examples for _ in range(G)]
        episodes = self.start(seeds)
        self.play(policy, episodes, generator, greedy=False)
        grouped = [episodes[i * G:(i + 1) * G] for i in range(len(examples))]
        return {"episodes": grouped, "examples": list(examples), "prompt_index": list(prompt_index),
                "level": max(len(ep.history) for ep in episodes)}
