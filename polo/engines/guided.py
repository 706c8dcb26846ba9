"""The ``guided`` engine: single-turn groups, and for each group with no correct rollout, completions obtained
with help (sampled under a prompt that carries a hint, or the expert demonstration itself) take the place of
some of the group's rows, trained under the original prompt.

Three published uses, one mechanism:

- RGPO, "Rationale-Guided Policy Optimization" (arXiv:2610.07342): reveal a growing part of the example's
  rationale (``levels``), keep a guided answer only when its reward beats the group's best unguided one
  (``accept: better``), replace the lowest-reward rows (``replace: lowest``, ``keep`` = k_max = 1).
- KEPO, "Knowledge-Enhanced Policy Optimization" (arXiv:2602.00400): a hint (the teacher's, ``source: teacher``,
  or the answer's), E guided samples per attempt accepted only when all are correct (``accept: all``, up to
  ``attempts`` tries), written over E randomly chosen slots (``replace: random``).
- DaGRPO, "Distinctiveness-aware GRPO" (arXiv:2512.06337): an off-policy anchor, the task's demonstration,
  replaces the lowest-reward row (``inject: demonstration``) and is marked ``extras["anchor"]``.

A replaced row keeps the original prompt; its ``old_logp`` is recomputed under that prompt by the current
policy (the importance ratio is 1 at the first update, as RGPO's transfer and DaGRPO's LUFFY-style anchors
prescribe), and ``extras["guided"]`` marks it (RGPO's NLL term on kept answers reads it; ``extras["anchor"]``
marks the demonstration anchors, 0 elsewhere). Metrics:
``log_metric/guided/groups_triggered`` and ``log_metric/guided/groups_rescued`` (per call, averaged over the step).
"""
from __future__ import annotations

import math
import random
from typing import Literal

import torch
from pydantic import Field

from polo.core.batch import concat_batches
from polo.core.model_prompts import ModelPrompts
from polo.engines.base import ENGINES, Rollouts, scored
from polo.engines.single_turn import SingleTurn
from polo.tasks.base import Example, Task, reprompt


def revealed(text: str, fraction: float) -> str:
    """The first ``⌈fraction·len⌉`` characters of ``text``."""
    return text[: math.ceil(fraction * len(text))]


def written_guide(task: Task, example: Example, source: str) -> str:
    """The full hint of a source that needs no model: the example's ``rationale`` column (its demonstration when it
    has none) for ``rationale``, its demonstration for ``answer``."""
    if source == "rationale":
        return str(example.columns.get("rationale", task.demonstration(example)))
    if source == "answer":
        return task.demonstration(example)
    raise ValueError(f"source {source!r} has no written hint; expected 'rationale' or 'answer'")


def hint_engine(engine: object) -> bool:
    """Whether ``engine`` samples under written hints that a warm start can show (``warm_start.hinted``): the
    ``guided`` engine generating from the ``answer`` or ``rationale`` source."""
    return isinstance(engine, Guided) and engine.inject == "generate" and engine.source != "teacher"


@ENGINES.register("guided")
class Guided(SingleTurn):
    """``single_turn``, then help for the groups with no correct rollout (see the module docstring)."""

    policy_kinds = frozenset({"causal"})

    paper = "Rationale-Guided Policy Optimization (arXiv:2610.07342); Knowledge-Enhanced Policy Optimization (arXiv:2602.00400)"
    provenance = "RECONSTRUCTED"
    provides = SingleTurn.provides | {"guided", "anchor"}

    inject: Literal["generate", "demonstration"] = "generate"
    """generate: sample under a hinted prompt; demonstration: the task's demonstration itself (DaGRPO anchor)."""
    source: Literal["rationale", "answer", "teacher"] = "rationale"
    """The hint: the example's ``rationale`` column (its demonstration when it has none), the demonstration,
    or a hint the ``teacher`` role writes from ``teacher_template``."""
    levels: list[float] = Field([0.5, 1.0], min_length=1)
    """Fractions of the hint revealed, tried in order until a level is accepted (RGPO: partial, then full)."""
    attempts: int = Field(1, ge=1)
    """Tries per level (KEPO's max_attempts)."""
    samples: int | None = Field(None, ge=1)
    """Guided samples per try (RGPO's G_h, KEPO's E); None: the group size."""
    accept: Literal["better", "all"] = "better"
    """better: keep guided answers whose reward beats the group's best unguided reward (RGPO); all: accept a try
    only when every guided sample is correct (KEPO)."""
    keep: int = Field(1, ge=1)
    """Most rows replaced per group (RGPO's k_max; KEPO: E)."""
    replace: Literal["lowest", "random"] = "lowest"
    """Which rows are replaced: the lowest scalar rewards, or random slots (the engine's generator)."""
    template: str = "Hint: {guide}\n{prompt}"
    """The guided prompt, from ``{prompt}`` and ``{guide}``."""
    teacher_template: str = "{prompt}{answer}\nHint:"
    """What the teacher reads to write a hint (``source: teacher``), from ``{prompt}`` and ``{answer}``."""
    hint_tokens: int = Field(32, ge=1)
    """Longest teacher-written hint, in tokens."""

    def roles(self) -> set[str]:
        return {"teacher"} if self.inject == "generate" and self.source == "teacher" else set()

    def rollout(self, policy, examples: list[Example], prompt_index: list[int], generator: torch.Generator, *,
                samples_per_prompt: int | None = None, greedy: bool = False) -> Rollouts:
        got = super().rollout(policy, examples, prompt_index, generator, samples_per_prompt=samples_per_prompt,
                              greedy=greedy)
        got.batch.extras["guided"] = torch.zeros(got.batch.batch_size)
        got.batch.extras["anchor"] = torch.zeros(got.batch.batch_size)
        if greedy:
            return got
        G = samples_per_prompt or self.settings.samples_per_prompt
        correct = got.correct.view(-1, G)
        triggered = (~correct.any(1)).nonzero().squeeze(1)
        log = self.settings.reward_context.log_metric
        log("guided/groups_triggered", float(len(triggered)))
        if len(triggered) == 0:
            return got
        reward = got.batch.scalar_reward().view(-1, G)
        if self.inject == "demonstration":
            donor = self.demonstrations(policy, [examples[g] for g in triggered.tolist()],
                                        [prompt_index[g] for g in triggered.tolist()])
            rescued, donor_rows = triggered, torch.arange(len(triggered))[:, None]
        else:
            rescued, donor, donor_rows = self.guided_samples(policy, examples, prompt_index, triggered, reward,
                                                             generator)
        log("guided/groups_rescued", float(len(rescued)))
        if len(rescued) == 0:
            return got
        slots = self.slots(reward[rescued], donor_rows.shape[1], generator)
        rows = (rescued[:, None] * G + slots)[donor_rows >= 0]
        return self.splice(policy, got, rows, donor, donor_rows[donor_rows >= 0])

    def guides(self, policy, examples: list[Example]) -> list[str]:
        """The full hint text of each example."""
        if self.source != "teacher":
            return [written_guide(self.settings.task, e, self.source) for e in examples]
        teacher = self.settings.models["teacher"]
        ids, mask = teacher.encode_prompts(self.teacher_asks(examples))
        out = self.generate(teacher, ids, mask, max_new_tokens=self.hint_tokens, greedy=True)
        return teacher.decode(out.response_ids, out.response_mask)

    def hinted(self, example: Example, guide: str, level: float) -> Example:
        """``example`` under the guided prompt (``template``) with the first ``level`` of ``guide`` revealed."""
        return reprompt(example, self.template, guide=revealed(guide, level))

    def teacher_asks(self, examples: list[Example]) -> list[str]:
        """What the teacher reads to write each example's hint (``teacher_template``)."""
        return [self.teacher_template.format(prompt=e.prompt, answer=e.answer) for e in examples]

    def model_prompts(self, key: str, query) -> list[ModelPrompts]:
        """The hinted prompts at the largest level, each followed by a response; with ``source: teacher``, the
        teacher's requests followed by the hint it writes, and the prompts filled with such a hint."""
        if self.inject == "demonstration":
            return []
        label, response = f"{key}.{self.registry_name}", (query.max_new, "response tokens")
        if self.source != "teacher":
            hinted = [self.hinted(e, written_guide(query.task, e, self.source), max(self.levels))
                      for e in query.examples]
            return [ModelPrompts(label, "the hinted prompt", f"{key}.template with the {self.source}",
                                 "shorten the template", hinted, [response])]
        hint = (self.hint_tokens, f"hint tokens ({key}.hint_tokens)")
        return [ModelPrompts(label, "the teacher's hint request", f"{key}.teacher_template", "shorten the template",
                             self.teacher_asks(query.examples), [hint]),
                ModelPrompts(label, "the hinted prompt", f"{key}.template with the teacher's hint",
                             "shorten the template", [self.hinted(e, "", 1.0) for e in query.examples],
                             [hint, response])]

    def hinted_demonstrations(self, task: Task, examples: list[Example], share: float,
                              rng: random.Random) -> list[Example]:
        """``examples`` with a ``share`` of them (drawn by ``rng``) under the guided prompt with their whole written
        hint (``source``, the largest of ``levels``): the supervised warm start's hinted demonstrations
        (``warm_start.hinted``), so the built-in model learns to read a hint as an LLM can. Partial hints are not
        shown: on addition, demonstrations under half-revealed answers kept the warm start's plain held-out accuracy
        near 0.1 for 1000 steps (seeds 0 and 1), where whole ones reached its 0.35 target in 430."""
        level = max(self.levels)
        return [self.hinted(e, written_guide(task, e, self.source), level) if rng.random() < share else e
                for e in examples]

    def guided_samples(self, policy, examples, prompt_index, triggered, reward, generator):
        """Sample under hinted prompts, level by level and try by try, for the triggered groups still without an
        accepted answer. Returns the rescued groups, the scored candidates and, per rescued group, the candidate
        rows it takes (−1 padded, ``keep`` wide)."""
        E = self.samples or self.settings.samples_per_prompt
        pending = triggered
        picks, parts, offset = {}, [], 0
        full = dict(zip(triggered.tolist(), self.guides(policy, [examples[g] for g in triggered.tolist()])))
        for level in self.levels:
            for _ in range(self.attempts):
                if len(pending) == 0:
                    break
                groups = pending.tolist()
                asks = [self.hinted(examples[g], full[g], level) for g in groups]
                cand = self.sample_scored(policy, asks, [examples[g] for g in groups],
                                          [prompt_index[g] for g in groups], E, generator)
                r, ok = cand.batch.scalar_reward().view(-1, E), cand.correct.view(-1, E)
                if self.accept == "better":
                    good = r > reward[pending].max(1, keepdim=True).values
                else:
                    good = ok.all(1, keepdim=True).expand(-1, E)
                for i, g in enumerate(groups):  # host bookkeeping over the few triggered groups
                    chosen = good[i].nonzero().squeeze(1)[: self.keep]
                    if len(chosen):
                        picks[g] = (chosen + offset + i * E).tolist()
                parts.append(cand)
                offset += len(groups) * E
                pending = torch.tensor([g for g in groups if g not in picks], dtype=torch.long)
        if not picks:
            return torch.zeros(0, dtype=torch.long), None, torch.zeros(0, 1, dtype=torch.long)
        rescued = torch.tensor(sorted(picks), dtype=torch.long)
        width = max(len(v) for v in picks.values())
        rows = torch.tensor([picks[g] + [-1] * (width - len(picks[g])) for g in rescued.tolist()])
        return rescued, Rollouts.concat(parts), rows

    def demonstrations(self, policy, examples: list[Example], prompt_index: list[int]) -> Rollouts:
        """The task's demonstration of each example as one scored row (the anchor)."""
        s = self.settings
        texts = [s.task.demonstration(e) for e in examples]
        ids, mask = policy.encode_completions(texts)
        prompt_ids, prompt_mask = policy.encode_prompts(examples)
        rows = {"prompt_ids": prompt_ids, "prompt_mask": prompt_mask, "response_ids": ids, "response_mask": mask,
                "group": torch.arange(len(examples)), "old_logp": torch.zeros(ids.shape)}
        return scored(rows, s, examples, texts, prompt_index)

    def slots(self, reward: torch.Tensor, width: int, generator: torch.Generator) -> torch.Tensor:
        """``[groups, width]`` the in-group rows to overwrite: the lowest rewards, or random distinct slots."""
        if self.replace == "lowest":
            key = reward
        else:
            key = torch.rand(reward.shape, generator=generator)
        return key.argsort(dim=1, stable=True)[:, :width]

    def splice(self, policy, got: Rollouts, rows: torch.Tensor, donor: Rollouts, donor_rows: torch.Tensor) -> Rollouts:
        """``got`` with ``rows`` replaced by ``donor``'s ``donor_rows`` under the original prompts; their
        ``old_logp`` recomputed by the current policy under those prompts."""
        B = got.batch.batch_size
        combined = concat_batches([got.batch, donor.batch.select(donor_rows)])
        order = torch.arange(B)
        order[rows] = B + torch.arange(len(rows))
        batch = combined.select(order)
        batch.group, batch.prompt_ids, batch.prompt_mask = got.batch.group, got.batch.prompt_ids, got.batch.prompt_mask
        batch.extras["guided"] = torch.zeros(B)
        batch.extras["guided"][rows] = 1.0
        batch.extras["anchor"] = batch.extras["guided"].clone() if self.inject == "demonstration" else torch.zeros(B)
        with torch.no_grad():
            fresh = policy.forward_logp(batch.prompt_ids[rows], batch.prompt_mask[rows], batch.response_ids[rows],
                                        batch.response_mask[rows], temperature=self.settings.temperature)["logp"]
        batch.old_logp = batch.old_logp.clone()
        batch.old_logp[rows] = fresh.to(batch.old_logp)
        completions, examples = list(got.completions), list(got.examples)
        for row, d in zip(rows.tolist(), donor_rows.tolist()):
            completions[row] = donor.completions[d]
        return Rollouts(batch, completions, examples)
