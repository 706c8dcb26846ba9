"""The ``single_turn`` engine: G sampled completions per prompt from polo's batched KV-cache sampler."""
from __future__ import annotations

import torch

from polo.core.registry import ConfigError
from polo.engines.base import ENGINES, Engine, Rollouts, scored
from polo.engines.vllm_generator import VLLMSettings
from polo.tasks.base import Example


@ENGINES.register("single_turn")
class SingleTurn(Engine):
    """One prompt, one completion per sample: prompts encoded (chat template when the policy uses one),
    ``samples_per_prompt`` completions each (consecutive rows form a group), decoded and scored. Prompts that
    carry model inputs (a vision policy's images) carry them into the batch's extras. A task's tool runs during
    generation (``Engine.generate``): its replies are in the completions' texts and masked out of the rows, and
    ``log_metric/tool/calls_executed`` is the mean number of executed calls per completion."""

    policy_kinds = frozenset({"causal", "vision"})

    def rollout(self, policy, examples: list[Example], prompt_index: list[int], generator: torch.Generator, *,
                samples_per_prompt: int | None = None, greedy: bool = False) -> Rollouts:
        s = self.settings
        if len(examples) != len(prompt_index):
            raise ConfigError(f"engine single_turn: {len(examples)} examples but {len(prompt_index)} prompt indices")
        return self.sample_scored(policy, examples, examples, prompt_index, samples_per_prompt or s.samples_per_prompt,
                                  generator, greedy)

    def sample_scored(self, policy, asks: list[Example], examples: list[Example], prompt_index: list[int], G: int,
                      generator: torch.Generator, greedy: bool = False) -> Rollouts:
        """``G`` completions of each prompt of ``asks``, scored as answers to ``examples`` (the same examples, or
        the originals of rewritten prompts); the rows keep the prompts they were sampled under."""
        s = self.settings
        prompt_ids, prompt_mask = policy.encode_prompts(asks)
        prompt_ids, prompt_mask = prompt_ids.repeat_interleave(G, 0), prompt_mask.repeat_interleave(G, 0)
        inputs = self.row_inputs(policy, asks, G, generator)
        out = self.generate(policy, prompt_ids, prompt_mask, max_new_tokens=s.max_new_tokens, temperature=s.temperature,
                            top_p=s.top_p, top_k=s.top_k, greedy=greedy, generator=generator, inputs=inputs)
        rows = {"prompt_ids": prompt_ids, "prompt_mask": prompt_mask, "response_ids": out.response_ids,
                "response_mask": out.response_mask, "group": torch.arange(len(asks)).repeat_interleave(G),
                "truncated": out.truncated, "old_logp": out.logp, "extras": inputs}
        repeated = [e for e in examples for _ in range(G)]
        index = [i for i in prompt_index for _ in range(G)]
        if out.tool_mask is not None:  # one reply after each executed call: count the replies' first tokens
            starts = out.tool_mask.diff(dim=1, prepend=out.tool_mask[:, :1] * 0) == 1
            s.reward_context.log_metric("tool/calls_executed", float(starts.sum()) / len(repeated))
        return scored(rows, s, repeated, policy.decode(out.response_ids, out.text_mask), index)

    def row_inputs(self, policy, asks: list[Example], G: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
        """The model inputs of the ``len(asks)·G`` rows besides their ids (the batch's extras, handed back to every
        forward): the prompts' own (``policy.prompt_inputs``) repeated G times; an engine may add its own."""
        return {name: x.repeat_interleave(G, 0) for name, x in policy.prompt_inputs(asks).items()}


@ENGINES.register("vllm")
class VLLMEngine(SingleTurn):
    """``single_turn`` with generation in vLLM (the optional extra polo[vllm]): the policy's weights are pushed
    into vLLM after every update, and the rows' ``old_logp`` are vLLM's log-probs (pair it with
    ``credit: rollout_is``, which recomputes them in the trainer and corrects the gap)."""

    policy_kinds = frozenset({"causal"})
    vllm: VLLMSettings = VLLMSettings()
    """How the policy is served in vLLM."""
