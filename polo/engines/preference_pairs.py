"""The ``preference_pairs`` engine: a file's chosen and rejected responses replayed as rollouts, no sampling (their
inputs, ``chosen`` for online pairs and ``history_logp``, are in polo/inputs/pairs.py).

Every pair is one group of two rows and ``extras["chosen"]`` is 1.0 on its preferred row, what the pairwise
losses (``dpo``, ``ipo``, ``mnpo``, ``oppo``) read.
"""
from __future__ import annotations

import torch

from polo.core.registry import ConfigError
from polo.engines.base import ENGINES, Engine, Rollouts, scored
from polo.tasks.base import Example


@ENGINES.register("preference_pairs")
class PreferencePairs(Engine):
    """Replays preference pairs: each prompt yields two rows, its ``chosen`` response then its ``rejected`` one
    (the examples' columns: task ``preference_pairs``), one group per pair; nothing is sampled. The responses are
    tokenized as completions (with the end-of-sequence token), ``old_logp`` comes from one no-grad forward of
    the policy, ``extras["chosen"]`` is ``[1, 0]`` per pair, and the rows are scored by the task's rewards like
    any engine's (so reward and accuracy metrics read the chosen and rejected responses). Held-out evaluation
    samples greedily as usual."""

    provides = Engine.provides | {"chosen"}
    group_size = 2

    def rollout(self, policy, examples: list[Example], prompt_index: list[int], generator: torch.Generator, *,
                samples_per_prompt: int | None = None, greedy: bool = False) -> Rollouts:
        if greedy or (samples_per_prompt or 2) != 2:
            raise ConfigError(f"engine preference_pairs replays a file's pairs (2 rows per prompt, nothing sampled); "
                              f"it cannot give samples_per_prompt={samples_per_prompt}, greedy={greedy} (a component "
                              f"that samples its own rollouts needs a sampling engine such as single_turn)")
        lacking = [e.prompt for e in examples if "chosen" not in e.columns or "rejected" not in e.columns]
        if lacking:
            raise ConfigError(f"engine preference_pairs needs examples with 'chosen' and 'rejected' columns (task "
                              f"preference_pairs); {len(lacking)} have none, e.g. the prompt {lacking[0][:60]!r}")
        s = self.settings
        prompt_ids, prompt_mask = policy.encode_prompts(examples)
        prompt_ids, prompt_mask = prompt_ids.repeat_interleave(2, 0), prompt_mask.repeat_interleave(2, 0)
        texts = [e.columns[side] for e in examples for side in ("chosen", "rejected")]
        response_ids, response_mask = policy.encode_completions(texts)
        with torch.no_grad():
            old = policy.forward_logp(prompt_ids, prompt_mask, response_ids, response_mask,
                                      temperature=s.temperature)["logp"]
        rows = {"prompt_ids": prompt_ids, "prompt_mask": prompt_mask, "response_ids": response_ids,
                "response_mask": response_mask, "group": torch.arange(len(examples)).repeat_interleave(2),
                "old_logp": old, "extras": {"chosen": torch.tensor([1.0, 0.0]).repeat(len(examples))}}
        repeated = [e for e in examples for _ in range(2)]
        index = [i for i in prompt_index for _ in range(2)]
        return scored(rows, s, repeated, policy.decode(response_ids, response_mask), index)
