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
proposal is strictly better. Who proposes is ``proposer``:

* ``policy`` (the paper's setting): the policy reads up to 3 failure transcripts of F_r (the last context, action
  and reply of a failed episode of the previous round, hardest task first), the current harness written as
  ``template=plain window=4 tools=edit,t,s max_turns=4``, then ``edit:``, and writes C edits (sampled with the
  trainer's generator, at most ``proposal_chars`` tokens, cut at the first separator), each one field as
  ``<field>=<value>`` (``window=3``, ``template=tools``, ``tools=edit,t``, ``max_turns=3``). An edit is valid
  when its value lies in the harness space (a template of ``TEMPLATES``, a window of ``windows``, a turn limit
  of ``turn_limits``, distinct tools of ``tool_space``) and it changes the harness into one not yet proposed;
  each invalid one is counted and its slot goes to the mutator.
* ``mutator`` (the stand-in): the proposals are C distinct single-field changes of the current harness (a window
  one shorter or longer within ``windows``, the other template, a turn limit one lower or higher within
  ``turn_limits``), drawn with the trainer's generator.

The **P-step** is
``round_steps`` RL updates under the chosen harness; each task's group success rate is recorded, and
F_{r+1} = the tasks with a rate ≤ ``tau_hard`` (the lowest first, at most ``hard_cap``; when none is that
hard, the hardest ``hard_cap`` seen).
Held-out evaluation plays the test seeds greedily under the current harness.

Metrics: ``self_hpo/harness_id``, ``self_hpo/window``, ``self_hpo/max_turns``, ``self_hpo/template`` (index
in ``TEMPLATES``), ``self_hpo/round``; after an H-step ``self_hpo/hard_tasks``, ``self_hpo/kept_score``
(the current harness on F_r), ``self_hpo/best_proposal`` and ``self_hpo/switched``, and with the policy as
proposer ``self_hpo/proposals_valid`` and ``self_hpo/proposals_invalid`` (its edits, parsed and validated) and
``self_hpo/switched_to_written`` (the harness chosen is one the policy wrote).
"""
from __future__ import annotations

import re
from typing import Any, ClassVar, Literal

import torch
from pydantic import Field, PrivateAttr

from polo.core.population import hard_tasks, strictly_better
from polo.core.registry import ConfigError, Settings
from polo.envs import ACTION_SEP, TURN_SEP
from polo.engines.base import ENGINES, EngineSetup
from polo.engines.hints import cut
from polo.engines.multi_turn import MultiTurn
from polo.engines.replies import sample_replies
from polo.engines.outer_loop import OuterLoopEngine

TEMPLATES = ("plain", "tools")
FIELDS = ("template", "window", "tools", "max_turns")
"""A harness's fields, in the order its text shows them."""
EDIT = re.compile(r"(template|window|tools|max_turns)=(\S+)")


def harness_text(harness: dict) -> str:
    """``template=plain window=4 tools=edit,t,s max_turns=4``: the harness as the proposing policy reads it."""
    return " ".join(f"{f}={','.join(harness[f]) if f == 'tools' else harness[f]}" for f in FIELDS)


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
    proposer: Literal["mutator", "policy"] = "mutator"
    """Who proposes harnesses: ``policy`` (the paper's: the policy writes edits from failure transcripts) or
    ``mutator`` (the stand-in: random single-field changes)."""
    proposal_chars: int = Field(24, ge=1)
    """The longest edit the policy may write, in tokens."""
    tool_space: list[str] | None = None
    """The tools an edit may list; None: the starting harness's."""

    _current: dict | None = PrivateAttr(None)
    _known: list[dict] = PrivateAttr(default_factory=list)
    _success: dict[int, float] = PrivateAttr(default_factory=dict)
    _round: int = PrivateAttr(1)
    _searched_at: int = PrivateAttr(0)
    _events: dict[str, float] = PrivateAttr(default_factory=dict)
    _tasks: dict[int, Any] = PrivateAttr(default_factory=dict)
    _turn_knob: bool = PrivateAttr(False)
    _failures: dict[int, str] = PrivateAttr(default_factory=dict)

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
        if self.proposer == "policy" and not greedy:  # each failed task's newest failure: the proposer's reading
            for r, correct in zip(got.turns, got.batch.extras["correct"].tolist()):
                if r.depth == 0 and not correct and (r.terminated or r.truncated):
                    self._failures[r.seed] = f"{r.context_text}{r.action}{ACTION_SEP}{r.observation}"
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
        written = self.written_proposals(policy, hard, generator) if self.proposer == "policy" else []
        self._failures = {}
        options = [h for h in self.neighbours() if h not in written]
        picked = torch.randperm(len(options), generator=generator)[: self.proposals - len(written)].tolist()
        candidates = written + [options[i] for i in picked]
        scores = self.play_settings(policy, [self._current, *candidates], hard, self.eval_episodes, generator,
                                    success=True).mean(1)
        best = strictly_better(float(scores[0]), scores[1:])
        if best >= 0:
            self._current = candidates[best]
            self.setting_id(self._current)
        events = {"self_hpo/hard_tasks": float(len(hard)), "self_hpo/kept_score": float(scores[0]),
                  "self_hpo/best_proposal": float(scores[1:].max()) if len(candidates) else 0.0,
                  "self_hpo/switched": float(best >= 0)}
        if self.proposer == "policy":
            events.update({"self_hpo/proposals_valid": float(len(written)),
                           "self_hpo/proposals_invalid": float(self.proposals - len(written)),
                           "self_hpo/switched_to_written": float(0 <= best < len(written))})
        return events

    def proposal_prompt(self, hard: list[int]) -> str:
        """What the proposing policy reads: up to 3 failure transcripts of the hard tasks (hardest first), the
        current harness, then ``edit:``."""
        failed = [self._failures[seed] for seed in hard if seed in self._failures][:3]
        return "\n".join([*(f"fail: {t}" for t in failed), f"harness: {harness_text(self._current)}", "edit:"])

    def written_proposals(self, policy, hard: list[int], generator: torch.Generator) -> list[dict]:
        """The valid, distinct harnesses among the ``proposals`` edits the policy writes (invalid ones dropped)."""
        replies = sample_replies(policy, [self.proposal_prompt(hard)] * self.proposals, self.proposal_chars,
                                 generator)
        out = []
        for reply in replies:
            harness = self.parse_edit(cut(reply))
            if harness is not None and harness != self._current and harness not in out:
                out.append(harness)
        return out

    def parse_edit(self, text: str) -> dict | None:
        """The current harness with the edit ``<field>=<value>`` applied, or None when ``text`` is not one edit
        whose value lies in the harness space (module docstring)."""
        match = EDIT.fullmatch(text.strip())
        if match is None:
            return None
        field, value = match.groups()
        if field == "template":
            return {**self._current, field: value} if value in TEMPLATES else None
        if field == "tools":
            tools = value.split(",")
            space = self.tool_space if self.tool_space is not None else self.harness.tools
            ok = all(tools) and len(set(tools)) == len(tools) and set(tools) <= set(space)
            return {**self._current, field: tools} if ok else None
        allowed = self.windows if field == "window" else self.turn_limits
        return {**self._current, field: int(value)} if value.isdigit() and int(value) in allowed else None

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
                "success": [[s, r] for s, r in self._success.items()], "searched_at": self._searched_at,
                "failures": [[s, t] for s, t in self._failures.items()]}

    def load_loop_state(self, state: dict[str, Any]) -> None:
        self._current, self._known = dict(state["current"]), [dict(h) for h in state["known"]]
        self._round, self._searched_at = int(state["round"]), int(state["searched_at"])
        self._success = {int(s): float(r) for s, r in state["success"]}
        self._failures = {int(s): str(t) for s, t in state.get("failures", [])}  # older checkpoints kept none

    @property
    def current_harness(self) -> dict:
        return dict(self._current)
