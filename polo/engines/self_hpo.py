"""The ``self_hpo`` engine: ``multi_turn`` episodes under a harness that is re-chosen every ``round_steps``
updates (Self-HPO, harness-policy optimization for coding agents; reconstructed from its abstract, no arXiv id
recorded, the numeric defaults ours).

A harness is a small record: ``template`` (how the context is laid out: ``plain``, the task's rendering, or
``tools``, a header ``t:<tool>,<tool>|`` naming the tools first), ``window`` (history turns shown), ``tools``
(the tool names the ``tools`` header lists; shown only, the environment's action set is unchanged) and
``max_turns`` (the environment's turn limit, its ``max_turns`` knob; a harness whose contexts outgrow the
model's positions stops the run with the engine's context error). Every row carries its harness's id
(``extras["harness_id"]``, ``meta["harness_id"]``); ids number the distinct harnesses in the order they were
first seen.

Round r: the **H-step** (before the first rollout of the round, from round 2 on) proposes ``proposals``
harnesses C and evaluates them and the current one, each by the success rate of ``eval_episodes`` sampled
episodes of the current policy on every task of the hard set F_r; the current harness is kept unless a
proposal is strictly better. In the paper the policy itself proposes harnesses from its failure transcripts;
here a deterministic mutator stands in for it: the proposals are C distinct single-field changes of the
current harness (a window one shorter or longer within ``windows``, the other template, a turn limit one
lower or higher within ``turn_limits``), drawn with the trainer's generator. The **P-step** is
``round_steps`` RL updates under the chosen harness; each task's group success rate is recorded, and
F_{r+1} = the tasks with a rate ≤ ``tau_hard`` (the lowest first, at most ``hard_cap``; when none is that
hard, the hardest ``hard_cap`` seen).
Held-out evaluation plays the test seeds greedily under the current harness.

Metrics: ``self_hpo/harness_id``, ``self_hpo/window``, ``self_hpo/max_turns``, ``self_hpo/template`` (index
in ``TEMPLATES``), ``self_hpo/round``; after an H-step ``self_hpo/hard_tasks``, ``self_hpo/kept_score``
(the current harness on F_r), ``self_hpo/best_proposal`` and ``self_hpo/switched``.
"""
from __future__ import annotations

from typing import Any, ClassVar, Literal

import torch
from pydantic import Field, PrivateAttr

from polo.core.population import hard_tasks, strictly_better
from polo.core.registry import ConfigError, Settings
from polo.envs import TURN_SEP
from polo.engines.base import ENGINES, EngineSetup
from polo.engines.multi_turn import MultiTurn
from polo.engines.outer_loop import OuterLoopEngine

TEMPLATES = ("plain", "tools")


class Harness(Settings):
    """What surrounds the policy in an episode."""

    template: Literal["plain", "tools"] = "plain"
    """Context layout: the task's rendering, or a tool header first."""
    window: int | None = Field(None, ge=0)
    """History turns in the context; None: the task's ``history_window``."""
    tools: list[str] = []
    """Tool names the ``tools`` header lists."""
    max_turns: int | None = Field(None, ge=1)
    """The environment's turn limit; None: its own."""


@ENGINES.register("self_hpo")
class SelfHpo(OuterLoopEngine):
    """``multi_turn`` under a harness re-chosen on the hard tasks every round (see the module docstring)."""

    provenance: ClassVar[str] = "RECONSTRUCTED"
    provides = MultiTurn.provides | {"harness_id"}
    row_key: ClassVar[str] = "harness_id"

    harness: Harness = Field(default_factory=Harness)
    """h_0, the starting harness."""
    round_steps: int = Field(20, ge=1)
    """S: RL updates per round (P-step)."""
    proposals: int = Field(4, ge=1)
    """C: harness proposals per H-step."""
    eval_episodes: int = Field(4, ge=1)
    """G_eval: sampled episodes per hard task and harness."""
    tau_hard: float = Field(0.25, ge=0, le=1)
    """A task is hard when its group success rate is at most this."""
    hard_cap: int = Field(64, ge=1)
    """|F|_max."""
    windows: list[int] = [1, 2, 3, 4]
    """The history windows a proposal may use."""
    turn_limits: list[int] = []
    """The turn limits a proposal may use; empty: the turn limit is never changed."""

    _current: dict | None = PrivateAttr(None)
    _known: list[dict] = PrivateAttr(default_factory=list)
    _success: dict[int, float] = PrivateAttr(default_factory=dict)
    _round: int = PrivateAttr(1)
    _searched_at: int = PrivateAttr(0)
    _events: dict[str, float] = PrivateAttr(default_factory=dict)
    _tasks: dict[int, Any] = PrivateAttr(default_factory=dict)
    _turn_knob: bool = PrivateAttr(False)

    def setup(self, setup: EngineSetup) -> None:
        super().setup(setup)
        task = setup.task
        h = self.harness.model_dump()
        h["window"] = task.history_window if h["window"] is None else h["window"]
        env = task.make_env()
        self._turn_knob = "max_turns" in type(env).model_fields
        if (h["max_turns"] is not None or self.turn_limits) and not self._turn_knob:
            raise ConfigError(f"engine self_hpo: harness turn limits need an environment with a max_turns knob; "
                              f"{env.name} has none (leave harness.max_turns and turn_limits unset)")
        h["max_turns"] = env.turn_limit if h["max_turns"] is None else h["max_turns"]
        if not self.windows:
            raise ConfigError("engine self_hpo: windows is empty; give the history windows proposals may use")
        self._current, self._known = h, [h]

    # ------------------------------------------------------------- settings of episodes
    def assign(self, n_examples: int, G: int, generator: torch.Generator) -> list:
        return [self._current] * (n_examples * G)

    def eval_settings(self, n: int) -> list:
        return [self._current] * n

    def setting_id(self, setting) -> int:
        if setting not in self._known:
            self._known.append(setting)
        return self._known.index(setting)

    def make_env(self, setting):
        if not self._turn_knob:
            return self.settings.task.make_env()
        return self.settings.task.make_env(max_turns=setting["max_turns"])

    def apply(self, setting, episode, chat):
        window = setting["window"]
        if window not in self._tasks:
            self._tasks[window] = self.settings.task.model_copy(update={"history_window": window})
        context = self._tasks[window].context(episode.env, episode.history, chat=chat)
        if chat or setting["template"] == "plain":
            return context
        return "t:" + ",".join(setting["tools"]) + TURN_SEP + context

    # ------------------------------------------------------------- the loop
    def rollout(self, policy, examples, prompt_index, generator, *, samples_per_prompt=None, greedy=False):
        got = super().rollout(policy, examples, prompt_index, generator, samples_per_prompt=samples_per_prompt,
                              greedy=greedy)
        outcome = {r.traj: (r.seed, c) for r, c in zip(got.turns, got.batch.extras["correct"].tolist()) if r.depth == 0}
        solved: dict[int, list[float]] = {}
        for seed, correct in outcome.values():
            solved.setdefault(seed, []).append(correct)
        for seed, wins in solved.items():
            self._success[seed] = sum(wins) / len(wins)
        return got

    def before_rollout(self, policy, generator: torch.Generator) -> None:
        if self._updates and self._updates % self.round_steps == 0 and self._searched_at != self._updates:
            self._searched_at = self._updates
            self._round += 1
            self._events = self.h_step(policy, generator)

    def neighbours(self) -> list[dict]:
        """Every single-field change of the current harness within the allowed values."""
        h, out = self._current, []
        out += [{**h, "window": w} for w in (h["window"] - 1, h["window"] + 1) if w in self.windows]
        out += [{**h, "template": t} for t in TEMPLATES if t != h["template"]]
        out += [{**h, "max_turns": m} for m in (h["max_turns"] - 1, h["max_turns"] + 1) if m in self.turn_limits]
        return out

    def h_step(self, policy, generator: torch.Generator) -> dict[str, float]:
        seeds, rates = list(self._success), torch.tensor(list(self._success.values()), dtype=torch.float64)
        chosen = hard_tasks(rates, self.tau_hard, self.hard_cap)
        if not len(chosen):
            chosen = torch.argsort(rates, stable=True)[: self.hard_cap]
        hard = [seeds[i] for i in chosen.tolist()]
        self._success = {}
        options = self.neighbours()
        picked = torch.randperm(len(options), generator=generator)[: self.proposals].tolist()
        candidates = [options[i] for i in picked]
        scores = self.play_settings(policy, [self._current, *candidates], hard, self.eval_episodes, generator,
                                    success=True).mean(1)
        best = strictly_better(float(scores[0]), scores[1:])
        if best >= 0:
            self._current = candidates[best]
            self.setting_id(self._current)
        return {"self_hpo/hard_tasks": float(len(hard)), "self_hpo/kept_score": float(scores[0]),
                "self_hpo/best_proposal": float(scores[1:].max()) if len(candidates) else 0.0,
                "self_hpo/switched": float(best >= 0)}

    def after_update(self, batch, context) -> dict[str, float]:
        row = super().after_update(batch, context)
        h = self._current
        row.update({"self_hpo/harness_id": float(self.setting_id(h)), "self_hpo/window": float(h["window"]),
                    "self_hpo/max_turns": float(h["max_turns"]),
                    "self_hpo/template": float(TEMPLATES.index(h["template"])),
                    "self_hpo/round": float(self._round), **self._events})
        self._events = {}
        return row

    # ------------------------------------------------------------- checkpoint
    def loop_state(self) -> dict[str, Any]:
        return {"current": dict(self._current), "known": [dict(h) for h in self._known], "round": self._round,
                "success": [[s, r] for s, r in self._success.items()], "searched_at": self._searched_at}

    def load_loop_state(self, state: dict[str, Any]) -> None:
        self._current, self._known = dict(state["current"]), [dict(h) for h in state["known"]]
        self._round, self._searched_at = int(state["round"]), int(state["searched_at"])
        self._success = {int(s): float(r) for s, r in state["success"]}

    @property
    def current_harness(self) -> dict:
        return dict(self._current)
