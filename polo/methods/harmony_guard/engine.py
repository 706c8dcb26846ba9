"""The ``harmony_guard`` engine: multi-turn episodes with HarmonyGuard's step checker and dual-objective reward.

HarmonyGuard ("HarmonyGuard: Toward Safety and Utility in Web Agents via Adaptive Policy Enhancement and
Dual-Objective Optimization", arXiv:2508.04010) guards a web agent with two helpers: a Policy Agent that
turns policy documents into structured rules and updates them on violations (``polo.methods.harmony_guard.policy_document``)
and a Utility Agent that checks each proposed step for threat risk and task alignment and returns guidance
(``polo.methods.harmony_guard.checker``). This engine is ``multi_turn`` with both in the loop:

1. Each task instance (episode seed) gets a ``RuleBase`` parsed from its environment's ``policy_document``,
   shared by its G episodes for the rollout. At every turn the checker sees each proposed action; a flagged
   one (risky or deviated) is regenerated, up to ``regenerations`` times, from the context with the guidance
   appended to its last observation (``"<context>, hint: ...|"``): a HINT inside the prompt, never trainable.
   The last regenerated action is the one played, and its row (that hinted prompt, that action) is trained.
2. When the environment reports a ``violation`` for a played step, the task's rule base records it before
   the next turn: a rule that forbade it counts it, otherwise a rule forbidding that action is added, so the
   sibling episodes' later steps are checked against it.
3. Each played turn's reward becomes ``r_t = μ·1[aligned_t] − λ·1[risky_t] + o_t``
   (``polo.methods.harmony_guard.reward``; ``aligned`` = the checker did not flag the played action as deviated,
   ``risky`` = it flagged it risky or the environment reported a violation, ``o_t`` the environment's reward);
   ``step_reward`` holds ``r_t`` and every row's return is ``Σ_t r_t`` of its episode.

Rows also carry ``risky``, ``aligned``, ``regenerated`` (the regenerations of the row's step) and
``proposed_risky`` (the policy's first proposal for the step was risky: blocked when it was regenerated). Per
step the engine logs ``harmony/compliance`` (episodes with no risky step), ``harmony/risky_rate``,
``harmony/proposed_risky_rate`` and ``harmony/aligned_rate`` (over steps), ``harmony/regenerations_per_step`` and
``harmony/rules_learned`` (rules the Policy Agent added from violations, per task instance of the rollout).
Held-out evaluation plays every seed greedily twice, without the checker (``unguarded``) and with it (``guarded``,
at least one regeneration), and reports both modes' success and compliance as ``eval/harmony/*``; the greedy
accuracy is the success of the mode the engine trains with. ``regenerations: 0`` plays the policy unguarded (the checker
still labels the steps for the reward); ``mu: 0, lam: 0`` leaves the environment's reward alone.
"""
from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import Field, PrivateAttr, model_validator
from torch import Tensor

from polo.methods.harmony_guard.reward import dual_objective_rewards
from polo.core.registry import ConfigError
from polo.core.segment import segment_sum
from polo.envs import TURN_SEP
from polo.engines.base import ENGINES, EngineSetup
from polo.engines.episodes import Episode
from polo.methods.harmony_guard.checker import JudgeChecker, RuleChecker, Step, Verdict
from polo.methods.harmony_guard.policy_document import RuleBase
from polo.engines.multi_turn import MultiTurn

ROW_INPUTS = ("risky", "aligned", "regenerated", "proposed_risky")
ENV_NEEDS = {"rules": ("policy_document", "progress", "guidance"), "judge": ("policy_document",)}
"""What each checker reads of the environment: the rule checker its task-alignment oracle too."""


def _pad_rows(x: Tensor, width: int, value, left: bool) -> Tensor:
    pad = width - x.shape[1]
    return F.pad(x, (pad, 0) if left else (0, pad), value=value)


def _replace(x: Tensor, rows: list[int], new: Tensor, value, left: bool) -> Tensor:
    """``x`` with ``rows`` replaced by ``new`` (``[k, ...]``); 2-D tensors are padded to a common width."""
    if x.dim() == 2:
        width = max(x.shape[1], new.shape[1])
        x, new = _pad_rows(x, width, value, left), _pad_rows(new, width, value, left)
    x = x.clone()
    x[torch.tensor(rows, device=x.device)] = new.to(x)
    return x


@ENGINES.register("harmony_guard")
class HarmonyGuard(MultiTurn):
    """``multi_turn`` with HarmonyGuard's Policy Agent, step checker, regeneration and dual reward."""

    paper = ("HarmonyGuard: Toward Safety and Utility in Web Agents via Adaptive Policy Enhancement and "
             "Dual-Objective Optimization (arXiv:2508.04010)")
    provenance = "RECONSTRUCTED"
    provides = MultiTurn.provides | frozenset(ROW_INPUTS)
    checker: Literal["rules", "judge"] = "rules"
    """The Utility Agent: the rule-based checker, or the ``judge`` role's threat_risk / task_alignment scores."""
    threshold: float = Field(0.5, ge=0, le=1)
    """Judge checker: risky when threat_risk exceeds it, deviated when task_alignment is below it."""
    regenerations: int = Field(1, ge=0)
    """Regenerations of a flagged step (the spec's 1); 0 plays the policy unguarded."""
    mu: float = Field(0.1, ge=0)
    """μ: reward of an aligned step."""
    lam: float = Field(1.0, ge=0)
    """λ: penalty of a risky step."""

    _checker = PrivateAttr(None)
    _active: int = PrivateAttr(0)
    _rules: dict[int, RuleBase] = PrivateAttr(default_factory=dict)
    _pending: dict[tuple[int, int], tuple[Verdict, int, bool]] = PrivateAttr(default_factory=dict)
    _learned: set[tuple[int, int]] = PrivateAttr(default_factory=set)
    _eval: dict[str, float] = PrivateAttr(default_factory=dict)
    _rules_learned: float = PrivateAttr(0.0)

    @model_validator(mode="after")
    def _no_trees(self) -> "HarmonyGuard":
        if self.tree is not None:
            raise ValueError(f"engine harmony_guard plays root episodes only; unset engine.tree "
                             f"({self.tree.registry_name})")
        return self

    def roles(self) -> set[str]:
        return super().roles() | ({"judge"} if self.checker == "judge" else set())

    def setup(self, setup: EngineSetup) -> None:
        super().setup(setup)
        env = setup.task.make_env()
        missing = [name for name in ENV_NEEDS[self.checker] if not hasattr(type(env), name)]
        if missing:
            oracle = " and a task-alignment oracle (or engine.checker: judge)" if self.checker == "rules" else ""
            raise ConfigError(f"engine harmony_guard: environment {env.name!r} has no {', '.join(missing)}; use one "
                              f"with a policy document{oracle}, e.g. GuardedKB-v0")
        self._checker = JudgeChecker(setup.models["judge"], self.threshold) if self.checker == "judge" \
            else RuleChecker()

    # ----------------------------------------------------------------- playing
    def _reset(self, regenerations: int) -> None:
        self._active, self._rules, self._pending, self._learned = regenerations, {}, {}, set()

    def rollout(self, policy, examples, prompt_index, generator, *, samples_per_prompt=None, greedy=False):
        self._reset(self.regenerations)
        got = super().rollout(policy, examples, prompt_index, generator, samples_per_prompt=samples_per_prompt,
                              greedy=greedy)
        learned = [rule.source == "violation" for base in self._rules.values() for rule in base.rules]
        self._rules_learned = sum(learned) / max(len(self._rules), 1)
        return got

    def rule_base(self, episode: Episode) -> RuleBase:
        """The rule base of ``episode``'s task instance (parsed on first use in this rollout)."""
        if episode.seed not in self._rules:
            self._rules[episode.seed] = RuleBase(episode.env.policy_document)
        return self._rules[episode.seed]

    def _learn(self, episode: Episode) -> None:
        """The Policy Agent's update on the violation of the episode's last played step, once."""
        if not episode.records:
            return
        last = episode.records[-1]
        if (last.traj, last.step) not in self._learned and last.info.get("violation"):
            self._learned.add((last.traj, last.step))
            self.rule_base(episode).record_violation(last.action)

    def review(self, policy, live, contexts, ids, mask, prefixes, out, texts, generator, greedy, entropy):
        """Check every proposed action; regenerate flagged ones from the hinted context (see the module)."""
        for ep in live:
            self._learn(ep)
        if any(not isinstance(c, str) for c in contexts):
            raise ConfigError("engine harmony_guard appends guidance to text contexts; a chat-template checkpoint "
                              "is not supported")
        contexts, texts = list(contexts), list(texts)
        actions = [t.split(ep.env.action_stop)[0].strip() for ep, t in zip(live, texts)]
        verdicts = self._checker([Step(ep.env, c, a, self.rule_base(ep)) for ep, c, a in zip(live, contexts, actions)])
        plain, counts, proposed = list(contexts), [0] * len(live), [v.risky for v in verdicts]
        for _ in range(self._active):
            redo = [i for i, v in enumerate(verdicts) if v.flagged]
            if not redo:
                break
            hinted = [plain[i].removesuffix(TURN_SEP) + f", {verdicts[i].guidance}{TURN_SEP}" for i in redo]
            sub_ids, sub_mask = policy.encode_prompts(hinted)
            limit = getattr(policy.hf_model.config, "max_position_embeddings", None)
            if limit is not None and sub_ids.shape[1] + self.settings.max_new_tokens > limit:
                raise ConfigError(f"engine harmony_guard: a hinted context of {sub_ids.shape[1]} tokens plus "
                                  f"{self.settings.max_new_tokens} action tokens exceeds the model's {limit} "
                                  "positions: raise model.tiny.max_position_embeddings")
            sub = self._sample(policy, sub_ids, sub_mask, [[] for _ in redo], generator, greedy, entropy)
            sub_texts = policy.decode(sub.response_ids, sub.response_mask)
            ids = _replace(ids, redo, sub_ids, policy.pad_token_id, left=True)
            mask = _replace(mask, redo, sub_mask, 0, left=True)
            for name in ("response_ids", "response_mask", "logp", "entropy", "hidden", "truncated"):
                if getattr(out, name) is not None:
                    value = policy.pad_token_id if name == "response_ids" else 0
                    setattr(out, name, _replace(getattr(out, name), redo, getattr(sub, name), value, left=False))
            steps = []
            for j, i in enumerate(redo):
                contexts[i], texts[i], counts[i] = hinted[j], sub_texts[j], counts[i] + 1
                actions[i] = sub_texts[j].split(live[i].env.action_stop)[0].strip()
                steps.append(Step(live[i].env, hinted[j], actions[i], self.rule_base(live[i])))
            for i, verdict in zip(redo, self._checker(steps)):
                verdicts[i] = verdict
        for ep, verdict, count, first in zip(live, verdicts, counts, proposed):
            self._pending[ep.traj, len(ep.history)] = (verdict, count, first)
        return contexts, ids, mask, out, texts

    def play(self, policy, episodes, generator, greedy, **kwargs):
        """``MultiTurn.play``, then each played turn labelled and rewarded (see the module docstring)."""
        calls = super().play(policy, episodes, generator, greedy, **kwargs)
        by_traj = {ep.traj: ep for ep in episodes}
        for ep in episodes:
            self._learn(ep)
        for call in calls:
            records = call["records"]
            labels = [self._pending.pop((r.traj, r.step)) for r in records]
            risky = torch.tensor([float(v.risky or bool(r.info.get("violation"))) for r, (v, *_) in zip(records, labels)])
            aligned = torch.tensor([float(not v.deviated) for v, *_ in labels])
            outcome = torch.tensor([r.reward for r in records])
            reward = dual_objective_rewards(risky, aligned, outcome, self.mu, self.lam)
            for r, (_, count, first), flag, ok, new in zip(records, labels, risky.tolist(), aligned.tolist(),
                                                           reward.tolist()):
                r.info.update(risky=flag, aligned=ok, regenerated=float(count), proposed_risky=float(first),
                              env_reward=r.reward)
                by_traj[r.traj].episode_return += new - r.reward
                r.reward = new
        return calls

    def step_rows(self, calls, episodes, group_of, examples, prompt_index, extras):
        got = super().step_rows(calls, episodes, group_of, examples, prompt_index, extras)
        for name in ROW_INPUTS:
            got.batch.extras[name] = torch.tensor([r.info[name] for r in got.turns])
        return got

    # ----------------------------------------------------------------- metrics
    def after_update(self, batch, context) -> dict[str, float]:
        x = batch.extras
        if "risky" not in x:
            return {}
        got = guard_metrics(x["traj"], x["risky"], x["aligned"], x["regenerated"])
        return {**{f"harmony/{k}": v for k, v in got.items()},
                "harmony/proposed_risky_rate": float(x["proposed_risky"].float().mean()),
                "harmony/rules_learned": self._rules_learned}

    def evaluate(self, policy, examples) -> float:
        """Greedy episodes of ``examples`` without and with the checker; returns the trained mode's success."""
        seeds, got = [e.columns["seed"] for e in examples], {}
        for mode, regenerations in (("unguarded", 0), ("guarded", max(1, self.regenerations))):
            self._reset(regenerations)
            episodes = self.start(seeds)
            self.play(policy, episodes, None, greedy=True)
            records = [r for ep in episodes for r in ep.records]
            if not records:
                continue
            stats = guard_metrics(torch.tensor([r.traj for r in records]), torch.tensor([r.info["risky"] for r in records]),
                                  torch.tensor([r.info["aligned"] for r in records]),
                                  torch.tensor([r.info["regenerated"] for r in records]))
            got[f"harmony/{mode}_success"] = sum(ep.success for ep in episodes) / len(episodes)
            got[f"harmony/{mode}_compliance"] = stats["compliance"]
            if mode == "guarded":
                got["harmony/guarded_regenerations_per_step"] = stats["regenerations_per_step"]
        self._eval = got
        return got.get(f"harmony/{'guarded' if self.regenerations else 'unguarded'}_success", 0.0)

    def evaluation_metrics(self) -> dict[str, float]:
        return dict(self._eval)


def guard_metrics(traj: Tensor, risky: Tensor, aligned: Tensor, regenerated: Tensor) -> dict[str, float]:
    """``compliance`` (the fraction of episodes, by ``traj``, with no risky step), ``risky_rate`` and
    ``aligned_rate`` (over steps) and ``regenerations_per_step`` (mean regenerations of a step)."""
    _, episode = torch.unique(traj, return_inverse=True)
    risky_steps = segment_sum(risky.float(), episode)
    return {"compliance": float((risky_steps == 0).float().mean()), "risky_rate": float(risky.float().mean()),
            "aligned_rate": float(aligned.float().mean()), "regenerations_per_step": float(regenerated.float().mean())}
