"""The ``multi_turn`` engine: G episodes per task instance of a text environment, in lock-step batches.

Every example of the ``environment`` task is one episode seed. Its G episodes start from the same state; at
each turn the contexts of all live episodes (``task.context``: the rendered history window) are encoded and
decoded in one batched sampler call, each action is cut at the environment's stop string, and the
environments step. An episode ends when its environment terminates or truncates (``turn_limit``).

The batch is the step-row view: one row per (episode, turn), prompt = that turn's context, response = the
action the policy generated (all of it trainable: observations and rendering live in the prompts, never in a
response). Every row carries its episode's return as its reward (the same on every row of the episode) and
``extras``: ``traj`` (episode id), ``step`` (turn index), ``anchor`` (equal ids ⇔ the turn was taken in the
same environment state text, per task instance; ``similarity_thresh`` clusters near-equal texts instead),
``step_reward``, ``valid``, ``tool_error`` and ``correct`` (the episode succeeded).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import Tensor

from polo.core.agent_primitives import anchor_ids
from polo.core.batch import RolloutBatch
from polo.core.registry import ConfigError
from polo.rollout.engine import ENGINES, Engine, EngineSetup, Rollouts
from polo.rollout.sampler import sample
from polo.tasks.base import Example


def _stack(parts: list[Tensor], width: int, value: float, left: bool) -> Tensor:
    """Pad each ``[b, w]`` part to ``width`` columns (on the left or the right) and concatenate the rows (padded
    positions are masked, so the pad value only has to be a valid token id)."""
    return torch.cat([F.pad(p, (width - p.shape[1], 0) if left else (0, width - p.shape[1]), value=value)
                      for p in parts])


@ENGINES.register("multi_turn")
class MultiTurn(Engine):
    """Episodes of the ``environment`` task's text environment, one batched decode per turn; step rows out."""

    provides = frozenset({"old_logp", "correct", "prompt_index", "traj", "step", "anchor", "step_reward"})
    similarity_thresh: float | None = Field(None, gt=0, le=1)
    """None: anchor states match by equal text (GiGPO's default); else difflib similarity ≥ this clusters them."""

    def setup(self, setup: EngineSetup) -> None:
        if not hasattr(setup.task, "make_env"):
            raise ConfigError(f"engine multi_turn plays environment episodes; task {setup.task.name!r} has none: "
                              f"use task: {{name: environment, env: {{name: TextGrid-v0}}}}")
        if setup.reward_specs:
            raise ConfigError(f"engine multi_turn: the environment's rewards are the episode's return; remove the "
                              f"recipe's rewards ({', '.join(s.name for s in setup.reward_specs)})")
        super().setup(setup)

    def rollout(self, policy, examples: list[Example], prompt_index: list[int], generator: torch.Generator, *,
                samples_per_prompt: int | None = None, greedy: bool = False) -> Rollouts:
        G = samples_per_prompt or self.settings.samples_per_prompt
        episodes = [i for i in range(len(examples)) for _ in range(G)]
        turns, results = self.play(policy, [examples[i].columns["seed"] for i in episodes], generator, greedy)
        return self.step_rows(turns, results, episodes, examples, prompt_index)

    def evaluate(self, policy, examples: list[Example]) -> float:
        """The fraction of ``examples`` (episode seeds) solved by one greedy episode each."""
        _, results = self.play(policy, [e.columns["seed"] for e in examples], None, greedy=True)
        return sum(r["success"] for r in results) / max(1, len(results))

    def play(self, policy, seeds: list[int], generator, greedy: bool) -> tuple[list[dict], list[dict]]:
        """Run one episode per seed in lock-step. Returns the turns (per decoding call: the live episodes, their
        sampled tensors, actions and step results) and per episode its return and success."""
        s, task = self.settings, self.settings.task
        envs = [task.make_env() for _ in seeds]
        for env, seed in zip(envs, seeds):
            env.reset(seed)
        histories: list[list[tuple[str, str]]] = [[] for _ in seeds]
        context_limit = getattr(policy.hf_model.config, "max_position_embeddings", None)
        turns, returns = [], [0.0] * len(seeds)
        live = list(range(len(seeds)))
        while live:
            ids, mask = policy.encode_prompts([task.context(envs[i], histories[i]) for i in live])
            if context_limit is not None and ids.shape[1] + s.max_new_tokens > context_limit:
                raise ConfigError(f"engine multi_turn: a context of {ids.shape[1]} tokens plus {s.max_new_tokens} "
                                  f"action tokens exceeds the model's {context_limit} positions: lower "
                                  f"task.history_window or raise model.tiny.max_position_embeddings")
            out = sample(policy, ids, mask, max_new_tokens=s.max_new_tokens, temperature=s.temperature,
                         top_p=s.top_p, top_k=s.top_k, greedy=greedy, generator=generator)
            actions = [text.split(envs[i].action_stop)[0].strip()
                       for i, text in zip(live, policy.decode(out.response_ids, out.response_mask))]
            steps = [envs[i].step(a) for i, a in zip(live, actions)]
            for i, a, r in zip(live, actions, steps):
                histories[i].append((a, r.observation))
                returns[i] += r.reward
            turns.append({"episodes": list(live), "prompt_ids": ids, "prompt_mask": mask, "out": out,
                          "actions": actions, "steps": steps})
            live = [i for i in live if not envs[i].done]
        return turns, [{"return": g, "success": env.success} for g, env in zip(returns, envs)]

    def step_rows(self, turns: list[dict], results: list[dict], episodes: list[int], examples: list[Example],
                  prompt_index: list[int]) -> Rollouts:
        """The step-row ``Rollouts`` of played episodes (rows ordered turn by turn)."""
        traj = [i for t in turns for i in t["episodes"]]
        step = [k for k, t in enumerate(turns) for _ in t["episodes"]]
        group = [episodes[i] for i in traj]
        infos = [r.info for t in turns for r in t["steps"]]
        outs = [t["out"] for t in turns]
        Tp = max(t["prompt_ids"].shape[1] for t in turns)
        T = max(o.response_ids.shape[1] for o in outs)
        response_mask = _stack([o.response_mask for o in outs], T, 0, left=False)
        steps_t = torch.tensor(step)
        batch = RolloutBatch(
            prompt_ids=_stack([t["prompt_ids"] for t in turns], Tp, 0, left=True),
            prompt_mask=_stack([t["prompt_mask"] for t in turns], Tp, 0, left=True),
            response_ids=_stack([o.response_ids for o in outs], T, 0, left=False),
            response_mask=response_mask,
            group=torch.tensor(group),
            rewards=torch.tensor([[results[i]["return"]] for i in traj], dtype=torch.float32),
            reward_names=("return",),
            truncated=torch.cat([o.truncated for o in outs]),
            old_logp=_stack([o.logp for o in outs], T, 0.0, left=False),
            turn=torch.where(response_mask.bool(), steps_t[:, None], -1),
            extras={
                "correct": torch.tensor([float(results[i]["success"]) for i in traj]),
                "prompt_index": torch.tensor([prompt_index[g] for g in group], dtype=torch.long),
                "traj": torch.tensor(traj, dtype=torch.long),
                "step": steps_t,
                "anchor": torch.tensor(anchor_ids([info["anchor_obs"] for info in infos], group,
                                                  self.similarity_thresh), dtype=torch.long),
                "step_reward": torch.tensor([r.reward for t in turns for r in t["steps"]], dtype=torch.float32),
                "valid": torch.tensor([float(info["valid"]) for info in infos]),
                "tool_error": torch.tensor([float(info["tool_error"]) for info in infos]),
            },
        )
        return Rollouts(batch, [a for t in turns for a in t["actions"]], [examples[g] for g in group])
