"""Extra inputs that components declare in ``needs()``, computed once per step and put on the batch.

Vocabulary (see polo/core/registry.py): ``ref_logp``, ``values``, ``values_privileged``,
``entropy_old``, ``sum_pi_sq``, ``old_dist``, ``ref_dist``, ``hidden``, ``greedy_reward``,
``rollout_logp``. ``old_logp`` is the sampler's (same weights) unless ``rollout_logp`` is needed, in which
case the trainer recomputes it and keeps the engine's log-probs apart.
"""
from __future__ import annotations

import torch

KNOWN = {"old_logp", "ref_logp", "values", "values_privileged", "entropy_old", "sum_pi_sq", "old_dist",
         "ref_dist", "hidden", "greedy_reward", "rollout_logp", "prompt_index", "correct"}

PRIVILEGED_TEMPLATE = " The ground truth answer is {answer}."


def check_needs(needs: set[str]) -> None:
    unknown = needs - KNOWN
    if unknown:
        raise ValueError(f"components need inputs the trainer cannot provide: {sorted(unknown)}; "
                         f"known inputs: {sorted(KNOWN)}")


def hidden_layer(components) -> int:
    layers = {c.hidden_layer for c in components if hasattr(c, "hidden_layer")}
    if len(layers) > 1:
        raise ValueError(f"components ask for different hidden layers {sorted(layers)}")
    return layers.pop() if layers else -1


def privileged_prompts(policy, examples):
    """Prompt ⊕ "The ground truth answer is {answer}." for the reference-guided critic (ReDiPPO)."""
    return policy.encode_prompts([e.prompt + PRIVILEGED_TEMPLATE.format(answer=e.answer) for e in examples])


@torch.no_grad()
def provide_inputs(trainer, got, needs: set[str]) -> None:
    """Fill ``got.batch`` with every input in ``needs``."""
    batch, policy, temp = got.batch, trainer.policy, trainer.recipe.rollout.temperature
    args = (batch.prompt_ids, batch.prompt_mask, batch.response_ids, batch.response_mask)
    old_needs = needs & {"entropy_old", "sum_pi_sq", "old_dist", "hidden", "rollout_logp"}
    if old_needs:
        layer = hidden_layer(trainer.components.values()) if "hidden" in needs else None
        full = bool(needs & {"sum_pi_sq", "old_dist"})
        out = policy.forward_logp(*args, temperature=temp, return_entropy="entropy_old" in needs,
                                  return_full=full, hidden_layer=layer, allow=batch.extras.get("allow"))
        if "rollout_logp" in needs:
            batch.extras["rollout_logp"] = batch.old_logp
            batch.old_logp = out["logp"]
        if "entropy_old" in needs:
            batch.extras["entropy_old"] = out["entropy"]
        if full:
            lp = out["logprobs_full"]
            if "sum_pi_sq" in needs:
                batch.extras["sum_pi_sq"] = (2 * lp).exp().sum(-1) * batch.mask
            if "old_dist" in needs:
                batch.extras["old_logprobs_full"] = lp
        if layer is not None:
            batch.extras["hidden"] = out["hidden"]
    if "ref_logp" in needs or "ref_dist" in needs:
        out = trainer.reference.forward_logp(*args, temperature=temp, return_full="ref_dist" in needs)
        batch.ref_logp = out["logp"]
        if "ref_dist" in needs:
            batch.extras["ref_logprobs_full"] = out["logprobs_full"]
    if "values" in needs:
        batch.values = trainer.critic(*args)
    if "values_privileged" in needs:
        ids, mask = privileged_prompts(policy, got.examples)
        batch.extras["privileged_prompt_ids"], batch.extras["privileged_prompt_mask"] = ids, mask
        batch.extras["values_privileged"] = trainer.privileged_critic(ids, mask, *args[2:])
    if "greedy_reward" in needs:
        batch.extras["greedy_reward"] = greedy_rewards(trainer, got)


def greedy_rewards(trainer, got) -> torch.Tensor:
    """Scalar reward of one greedy completion per group, broadcast to the group's rows (ReMax)."""
    from polo.train.collect import collect

    batch = got.batch
    first = torch.ones_like(batch.group, dtype=torch.bool)
    first[1:] = batch.group[1:] != batch.group[:-1]
    rows = first.nonzero().squeeze(-1).tolist()
    greedy = collect(trainer.policy, trainer.task, trainer.reward_specs, [got.examples[i] for i in rows],
                     batch.extras["prompt_index"][rows].tolist(), trainer.recipe.rollout,
                     trainer.max_new_tokens, trainer.sample_generator, samples_per_prompt=1, greedy=True)
    per_group = greedy.batch.scalar_reward()
    return per_group[torch.cumsum(first.long(), 0) - 1]
