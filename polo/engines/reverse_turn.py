"""The ``reverse_turn`` engine: RTPO's sparse reverse tree, one turn level per training step.

"Reverse-Turn Policy Optimization" trains the turns of multi-turn episodes one level at a time, from the last
turn back to the first, so that every decision is judged by continuations of the *current* policy and is
trained in the exact context it was generated in. The engine keeps a *sweep*: G base episodes per task,
played once. Each ``rollout`` call serves the next level k (from the longest base episode's length K down
to 1): up to ``nodes_per_task`` base episodes per task that reach turn k are nodes; from each node's stored
state (restored from the snapshot kept while the base episode played, or replayed for a deterministic
environment without snapshots: the same context text and token ids the base episode had) the current policy
plays ``continuations`` episodes to the end. The rows are the continuations' turn-k actions only (the
turns after k score the decision but carry no loss), grouped by node, so ``advantage: grpo`` gives
``A_{n,m} = (R_{n,m} − mean_m R_{n,·}) / std_u``. The trainer then updates the policy, and the next call's
level k−1 continuations come from the updated policy; ``policy_version`` (the updates done when a row was
generated) records it. A new sweep starts once level 1 is served, with the step's tasks.

The sweep is checkpointed (``state_dict``: each base episode's seed and turns, the level, the policy version):
a resumed run goes on with the level it stopped at and ends bit for bit where an uninterrupted run ends. The
states of a sweep are re-created by replay, so this holds for a ``deterministic`` environment; for any other
the checkpoint holds no sweep and the resumed run says, in one line, that it starts a new one (its levels are
steps of their own, so no trained sample is lost or repeated).

Diagnostics: ``rtpo/level`` (the turn level a step trained) and ``rtpo/informative_nodes`` (the share of its
nodes whose continuations' returns differ, so their turn-k actions get a nonzero group advantage).
"""
from __future__ import annotations

import warnings
from typing import Any

import torch
from pydantic import Field, PrivateAttr

from polo.engines.base import ENGINES, EngineSetup, Rollouts
from polo.engines.episodes import Episode, check_restorable
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
    _served: int = PrivateAttr(0)

    def setup(self, setup: EngineSetup) -> None:
        super().setup(setup)
        check_restorable(setup.task.make_env(), "engine reverse_turn")

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
        sweep["level"], self._served = k - 1, k
        return rows

    def after_update(self, batch, context) -> dict[str, float]:
        """``rtpo/level`` and ``rtpo/informative_nodes``: a node (a batch group) informs when ``max R > min R`` over
        its continuations."""
        reward, group = batch.scalar_reward(), batch.group
        n = int(group.max()) + 1
        high = torch.full((n,), -torch.inf).scatter_reduce(0, group, reward, "amax")
        low = torch.full((n,), torch.inf).scatter_reduce(0, group, reward, "amin")
        return {"rtpo/level": float(self._served), "rtpo/informative_nodes": float((high > low).float().mean())}

    def _new_sweep(self, policy, examples, prompt_index, generator, samples_per_prompt) -> dict:
        """G base episodes per task, played by the current policy; the sweep starts at their longest length."""
        G = samples_per_prompt or self.settings.samples_per_prompt
        seeds = [e.columns["seed"] for e in examples for _ in range(G)]
        episodes = self.start(seeds)
        self.play(policy, episodes, generator, greedy=False, keep=lambda episode, action: True)
        grouped = [episodes[i * G:(i + 1) * G] for i in range(len(examples))]
        return {"episodes": grouped, "examples": list(examples), "prompt_index": list(prompt_index),
                "level": max(len(ep.history) for ep in episodes)}

    def state_dict(self) -> dict[str, Any]:
        """The policy version and, for a deterministic environment, the sweep as plain data (each base episode's
        seed, trajectory id, turns and return; its examples; the level); else ``sweep`` None and ``dropped``."""
        sweep = self._sweep
        if sweep is None or not sweep["episodes"][0][0].env.deterministic:
            return {"version": self._version, "sweep": None, "dropped": sweep is not None}
        return {"version": self._version, "dropped": False, "sweep": {
            "level": sweep["level"], "prompt_index": list(sweep["prompt_index"]),
            "examples": [{"prompt": e.prompt, "answer": e.answer, "columns": dict(e.columns),
                          "messages": None if e.messages is None else [dict(m) for m in e.messages]}
                         for e in sweep["examples"]],
            "episodes": [[{"seed": ep.seed, "traj": ep.traj, "history": [list(turn) for turn in ep.history],
                           "return": ep.episode_return} for ep in group] for group in sweep["episodes"]]}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """The checkpointed sweep, its base episodes' states to be re-created by replay; without one (a
        non-deterministic environment, or a checkpoint older than this) the resumed run says it starts a new sweep."""
        self._version, sweep = int(state.get("version", 0)), state.get("sweep")
        if sweep is None:
            self._sweep = None
            if state.get("dropped", True):
                why = (f"environment {self.settings.task.make_env().name} is not deterministic" if "dropped" in state
                       else "written before sweeps were checkpointed")
                warnings.warn(f"engine reverse_turn: the checkpoint holds no sweep ({why}): the resumed run starts a "
                              "new sweep, not bit for bit where an uninterrupted run would be", stacklevel=2)
            return
        examples = [Example(e["prompt"], e["answer"], e["columns"],
                            None if e["messages"] is None else tuple(e["messages"])) for e in sweep["examples"]]
        episodes = [[Episode(self.settings.task.make_env(), e["seed"], e["traj"], [tuple(t) for t in e["history"]],
                             e["return"]) for e in group] for group in sweep["episodes"]]
        self._sweep = {"episodes": episodes, "examples": examples, "prompt_index": list(sweep["prompt_index"]),
                       "level": sweep["level"]}
