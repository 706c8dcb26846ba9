"""The ``retroformer`` engine: a frozen actor's trials, reflections on the failed ones from the policy.

Retroformer ("Retroformer: Retrospective Large Language Agents with Policy Gradient Optimization",
arXiv:2308.02151): the policy trained here is the *retrospective* model; the ``frozen_actor`` role plays the
environment and is never trained. Per task seed of the ``reflection`` task:

1. trial 1: the actor plays up to ``first_attempts`` episodes without memory (in one lock-step batch); the first
   failed one is reflected on (a task whose attempts all succeed gives no rows);
2. the policy writes G = ``rollout.samples_per_prompt`` reflections y on that failed trial (context: the trial and
   its return, ``ReflectionTask.retro_context``); each opens a branch whose memory holds its reflections;
3. trial k + 1 of each branch: the actor plays with the memory (the newest ``memory_size`` reflections) in its
   context; a branch whose trial failed gets one more reflection, up to ``trials`` trials in all.

Rows: one per reflection, prompt = the retrospective context, response = the reflection (the only trainable
tokens), reward ``r = G_{k+1} − G_k`` (``polo.methods.retroformer.reward``), group = (task, trial index k): with advantage
``grpo`` and ``scale_by_std: false`` that is the spec's A = r − mean r over the reflections for the same task and
trial. ``extras`` holds ``correct`` (trial k + 1 succeeded), ``prompt_index`` and ``trial`` (k).

Each training step logs (``log_metric/retroformer/*``) the actor's first-trial success over every attempt
(``first_trial_success``), the next-trial success after a reflection (``next_trial_success``), the mean
improvement r (``improvement``) and the fraction of tasks with a failed trial (``reflected_tasks``).
``evaluate`` plays each held-out seed once, greedily (actor and reflections): the fraction solved within
``trials`` trials (second-trial success for the default 2), and ``evaluation_metrics`` adds the first-trial success
(``eval/retroformer/first_trial``) beside it (``eval/retroformer/within_trials``).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from pydantic import Field, PrivateAttr, model_validator

from polo.core.batch import RolloutBatch
from polo.methods.retroformer.reward import reflection_rewards
from polo.core.registry import ConfigError
from polo.envs import TURN_SEP
from polo.engines.base import ENGINES, EngineSetup, Rollouts
from polo.engines.episodes import Episode
from polo.engines.multi_turn import MultiTurn, _stack
from polo.tasks.base import Example


@dataclass
class Branch:
    """One line of trials of task ``task`` after its first failed trial: the latest trial and the memory."""

    task: int
    last: Episode
    memory: list[str] = field(default_factory=list)


@dataclass
class TrialOutcomes:
    """What ``Retroformer.trials`` played: the first attempts' successes, the reflection calls (sampler output,
    prompts, per row its branch and trial index, returns before and after) and which tasks were solved."""

    first_success: list[bool]
    calls: list[dict] = field(default_factory=list)
    solved: list[bool] = field(default_factory=list)


@ENGINES.register("retroformer")
class Retroformer(MultiTurn):
    """Frozen-actor trials and the policy's reflections on the failed ones; reflection rows out."""

    paper = "Retroformer: Retrospective Large Language Agents with Policy Gradient Optimization (arXiv:2308.02151)"
    provenance = "SECONDARY"
    """The return-difference reward is the authors' (their README); the trial loop, the memory rendering and the
    group-relative baseline are ours."""
    provides = frozenset({"old_logp", "correct", "prompt_index", "trial"})
    trials: int = Field(2, ge=2)
    """Trials per task in all (the first included): a branch reflects after each failed trial before the last."""
    first_attempts: int = Field(4, ge=1)
    """Actor attempts at trial 1 per task in training, the first failed one reflected on (greedy: 1)."""

    _memory: dict[int, list[str]] = PrivateAttr(default_factory=dict)
    _next_traj: int = PrivateAttr(0)
    _last_eval: dict[str, float] = PrivateAttr(default_factory=dict)

    def evaluation_metrics(self) -> dict[str, float]:
        """The last ``evaluate``'s first-trial success and success within the trials (``eval/retroformer/*``)."""
        return {f"retroformer/{name}": value for name, value in self._last_eval.items()}

    @model_validator(mode="after")
    def _no_branches(self) -> "Retroformer":
        if self.tree is not None:
            raise ValueError(f"engine retroformer grows no rollout trees: unset engine.tree ({self.tree.registry_name})")
        return self

    def roles(self) -> set[str]:
        return {"frozen_actor"}

    def setup(self, setup: EngineSetup) -> None:
        if not hasattr(setup.task, "retro_context"):
            raise ConfigError(f"engine retroformer needs the reflection task (actor and retrospective contexts); got "
                              f"task {setup.task.name!r}: use task: {{name: reflection, env: {{name: TextGrid-v0}}}}")
        super().setup(setup)

    def context(self, episode: Episode, chat: bool) -> str:
        """The actor's context: its branch's reflection memory, then the episode."""
        return self.settings.task.actor_context(episode.env, episode.history, self._memory.get(episode.traj, []))

    def _episodes(self, seeds: list[int], memories: list[list[str]]) -> list[Episode]:
        out = []
        for seed, memory in zip(seeds, memories):
            episode = Episode.start(self.settings.task.make_env(), seed, self._next_traj)
            self._memory[episode.traj] = list(memory)
            self._next_traj += 1
            out.append(episode)
        return out

    def trials_of(self, policy, actor, seeds: list[int], samples: int, generator, greedy: bool,
                  attempts: int = 1, reflect: bool = True) -> TrialOutcomes:
        """Play the trials of ``seeds`` (see the module docstring) with ``samples`` reflections per failed first
        trial; ``reflect=False`` keeps the reflections out of the actor's memory (the no-reflection baseline)."""
        self._memory.clear()
        self._next_traj = 0
        try:
            first = self._episodes([s for s in seeds for _ in range(attempts)], [[]] * (len(seeds) * attempts))
            self.play(actor, first, generator, greedy)
            outcomes = TrialOutcomes([ep.success for ep in first])
            branches, solved = [], []
            for i in range(len(seeds)):
                failed = [ep for ep in first[i * attempts:(i + 1) * attempts] if not ep.success]
                solved.append(not failed)
                branches += [Branch(i, failed[0]) for _ in range(samples)] if failed else []
            for k in range(1, self.trials):
                live = [b for b in branches if not b.last.success]
                if not live:
                    break
                outcomes.calls.append(self._reflect(policy, actor, live, k, generator, greedy, reflect))
            for b in branches:
                solved[b.task] = solved[b.task] or b.last.success
            outcomes.solved = solved
            return outcomes
        finally:
            self._memory.clear()

    def _reflect(self, policy, actor, live: list[Branch], k: int, generator, greedy: bool, reflect: bool) -> dict:
        """One reflection per live branch on its trial k, then its trial k + 1 with the memory."""
        s, task = self.settings, self.settings.task
        contexts = [task.retro_context(b.last.env, b.last.history, b.last.episode_return) for b in live]
        ids, mask = policy.encode_prompts(contexts)
        out = self.generate(policy, ids, mask, max_new_tokens=s.max_new_tokens, temperature=s.temperature,
                            top_p=s.top_p, top_k=s.top_k, greedy=greedy, generator=generator)
        texts = [t.split(TURN_SEP)[0].strip() for t in policy.decode(out.response_ids, out.response_mask)]
        before = torch.tensor([b.last.episode_return for b in live])
        for b, text in zip(live, texts):
            b.memory.append(text)
        nxt = self._episodes([b.last.seed for b in live], [b.memory if reflect else [] for b in live])
        self.play(actor, nxt, generator, greedy)
        for b, ep in zip(live, nxt):
            b.last = ep
        after = torch.tensor([ep.episode_return for ep in nxt])
        return {"prompt_ids": ids, "prompt_mask": mask, "out": out, "texts": texts, "task": [b.task for b in live],
                "trial": k, "reward": reflection_rewards(before, after), "success": [ep.success for ep in nxt]}

    def rollout(self, policy, examples: list[Example], prompt_index: list[int], generator: torch.Generator, *,
                samples_per_prompt: int | None = None, greedy: bool = False) -> Rollouts:
        G = samples_per_prompt or self.settings.samples_per_prompt
        actor = self.settings.models["frozen_actor"]
        seeds = [e.columns["seed"] for e in examples]
        got = self.trials_of(policy, actor, seeds, G, generator, greedy, 1 if greedy else self.first_attempts)
        if not got.calls:
            raise RuntimeError(f"engine retroformer: the actor solved every trial of all {len(seeds)} tasks, so there "
                               f"is nothing to reflect on; raise engine.first_attempts or rollout.prompts_per_step")
        calls = got.calls
        tasks = [t for c in calls for t in c["task"]]
        trial = [c["trial"] for c in calls for _ in c["task"]]
        group_of: dict[tuple[int, int], int] = {}
        group = [group_of.setdefault(key, len(group_of)) for key in zip(tasks, trial)]
        outs = [c["out"] for c in calls]
        Tp = max(c["prompt_ids"].shape[1] for c in calls)
        T = max(o.response_ids.shape[1] for o in outs)
        reward = torch.cat([c["reward"] for c in calls]).float()
        success = torch.tensor([float(x) for c in calls for x in c["success"]])
        batch = RolloutBatch(
            prompt_ids=_stack([c["prompt_ids"] for c in calls], Tp, 0, left=True),
            prompt_mask=_stack([c["prompt_mask"] for c in calls], Tp, 0, left=True),
            response_ids=_stack([o.response_ids for o in outs], T, 0, left=False),
            response_mask=_stack([o.response_mask for o in outs], T, 0, left=False),
            group=torch.tensor(group),
            rewards=reward[:, None],
            reward_names=("improvement",),
            truncated=torch.cat([o.truncated for o in outs]),
            old_logp=_stack([o.logp for o in outs], T, 0.0, left=False),
            extras={"correct": success,
                    "prompt_index": torch.tensor([prompt_index[t] for t in tasks], dtype=torch.long),
                    "trial": torch.tensor(trial, dtype=torch.long)},
        )
        log = self.settings.reward_context.log_metric
        log("retroformer/first_trial_success", sum(got.first_success) / len(got.first_success))
        log("retroformer/next_trial_success", float(success.mean()))
        log("retroformer/improvement", float(reward.mean()))
        log("retroformer/reflected_tasks", len(set(tasks)) / len(seeds))
        return Rollouts(batch, [t for c in calls for t in c["texts"]], [examples[t] for t in tasks])

    def evaluate(self, policy, examples: list[Example]) -> float:
        """The fraction of ``examples`` solved within ``trials`` greedy trials, reflections greedy too."""
        got = self.trials_of(policy, self.settings.models["frozen_actor"], [e.columns["seed"] for e in examples], 1,
                             None, greedy=True)
        n = max(1, len(examples))
        self._last_eval = {"first_trial": sum(got.first_success) / n, "within_trials": sum(got.solved) / n}
        return self._last_eval["within_trials"]
