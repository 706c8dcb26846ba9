"""Input providers that probe the policy on multi-turn step rows, built from the rows' ``TurnRecord``s.

* ``gold_logp`` (IGPO): ``ℓ = (1/|y*|) Σ_k log π(y*_k | context, probe prefix, y*_{<k})``, the mean log-prob
  of the episode's gold answer teacher-forced after the row's context and the environment's answer prefix
  (``"a:"`` in KBLookup, ``"="`` in GuessNum).
* ``info_gain`` (InfoPO): for a turn k with an observation o_k and a next turn k+1 in the batch, the mean
  over the next action's tokens of ``log π(a_{k+1} | context_{k+1}) − log π(a_{k+1} | context_{k+1} with o_k
  replaced by the environment's placeholder)``, the placeholder length-matched to o_k (its last character
  repeated, or cut); credited to row k, the turn that elicited o_k. 0 elsewhere.
* ``memory_utility`` (HiMPO): on a memory-write row, ``Rec(m_after) − Rec(m_before)`` where ``Rec(m)`` is the
  gold answer's mean log-prob after only the task and the memory (``"<question>|m:<m>|" + prefix``); 0 on
  other rows.

All are no-grad forwards of the current policy at temperature 1, batched over the rows.
"""
from __future__ import annotations

import torch
from torch import Tensor

from polo.core.advantages.infopo import counterfactual_gain
from polo.envs import TURN_SEP
from polo.policy.inputs import pad_sequences
from polo.engines.episodes import TurnRecord
from polo.inputs.base import ProviderContext, register_provider
from polo.tasks.base import Example


def turn_records(rollouts, name: str) -> list[TurnRecord]:
    """The ``TurnRecord`` of every step row; ValueError naming input ``name`` when the engine wrote none."""
    if rollouts.turns is None:
        raise ValueError(f"input {name!r} probes multi-turn rows: use engine: {{name: multi_turn}}")
    return rollouts.turns


def _encode(policy, contexts: list[str | Example], suffixes: list[str]) -> tuple[Tensor, Tensor]:
    """Left-padded ids of each context (chat messages rendered by the template) followed by its suffix's tokens."""
    ids, mask = policy.encode_prompts(contexts)
    tails = [policy.tokenizer(s, add_special_tokens=False)["input_ids"] if s else [] for s in suffixes]
    seqs = [row[m.bool()].tolist() + t for row, m, t in zip(ids, mask, tails)]
    return pad_sequences(seqs, policy.pad_token_id, left=True, device=policy.device)


def answer_logp(policy, contexts: list[str | Example], prefixes: list[str], golds: list[str]) -> Tensor:
    """``[n]`` mean log-prob of each gold answer's tokens after its context and probe prefix (no eos)."""
    if not contexts:
        return torch.zeros(0)
    ids, mask = _encode(policy, contexts, prefixes)
    gold_ids, gold_mask = pad_sequences([policy.tokenizer(g, add_special_tokens=False)["input_ids"] for g in golds],
                                        policy.pad_token_id, left=False, device=policy.device)
    logp = policy.forward_logp(ids, mask, gold_ids, gold_mask)["logp"]
    return logp.sum(1) / gold_mask.sum(1).clamp_min(1)


def _probe_parts(records: list[TurnRecord], name: str) -> None:
    bad = next((r for r in records if r.gold is None or r.probe_prefix is None), None)
    if bad is not None:
        raise ValueError(f"input {name!r} needs an environment with an answer probe (a gold answer and a "
                         f"probe_prefix); the episode of seed {bad.seed} has none")


def answer_probe_missing(task) -> str | None:
    """What an environment task lacks for the answer probe (a gold answer and a ``probe_prefix``), read off one
    episode before any work; None when it has both, or is no environment task (``turn_records`` then refuses)."""
    if not hasattr(task, "make_env"):
        return None
    env = task.make_env()
    env.reset(0)
    if env.gold is None:
        return (f"environment {env.name} has no gold answer (its gold is None): give it a gold property, or use a "
                f"method that reads no gold answer")
    if env.probe_prefix is None:
        return (f"environment {env.name} has no probe_prefix (the text after which the policy states its answer): "
                f"give it one, or use a method that reads no answer probe")
    return None


@register_provider("gold_logp", check=answer_probe_missing)
@torch.no_grad()
def gold_logp(ctx: ProviderContext, rollouts) -> dict[str, Tensor]:
    """``gold_logp`` ``[N]``: the answer probe after each row's context (IGPO's belief ℓ)."""
    records = turn_records(rollouts, "gold_logp")
    _probe_parts(records, "gold_logp")
    value = answer_logp(ctx.policy, [r.context for r in records], [r.probe_prefix for r in records],
                        [r.gold for r in records])
    return {"gold_logp": value.float().cpu()}


def matched_placeholder(placeholder: str, observation: str) -> str:
    """``placeholder`` length-matched to ``observation``: cut, or extended by repeating its last character."""
    return (placeholder + placeholder[-1] * len(observation))[: len(observation)] if placeholder else ""


def counterfactual_context(record: TurnRecord, observation: str, placeholder: str) -> str | Example:
    """``record``'s context with the previous turn's ``observation`` (its end) replaced by ``placeholder``
    length-matched to it; for chat messages, the last message's content is replaced."""
    matched = matched_placeholder(placeholder, observation)
    if isinstance(record.context, Example):
        messages = [dict(m) for m in record.context.messages]
        messages[-1]["content"] = matched
        return Example(record.context.prompt, record.context.answer, {}, tuple(messages))
    tail = observation + TURN_SEP
    if not record.context.endswith(tail):
        raise ValueError(f"info_gain: the context of turn {record.step} (seed {record.seed}) does not end with the "
                         f"previous observation {observation!r}; the environment's rendering must end with it")
    return record.context[: -len(tail)] + matched + TURN_SEP


@register_provider("info_gain")
@torch.no_grad()
def info_gain(ctx: ProviderContext, rollouts) -> dict[str, Tensor]:
    """``info_gain`` ``[N]``: InfoPO's counterfactual gain of each turn's observation, read off the next turn."""
    records = turn_records(rollouts, "info_gain")
    batch = rollouts.batch
    row_of = {(r.traj, r.step): i for i, r in enumerate(records)}
    pairs = [(row_of[r.traj, r.step - 1], i) for i, r in enumerate(records)
             if r.step > 0 and (r.traj, r.step - 1) in row_of and records[row_of[r.traj, r.step - 1]].observation]
    gain = torch.zeros(len(records))
    if not pairs:
        return {"info_gain": gain}
    env = ctx.task.make_env()
    prev, index = (list(x) for x in zip(*pairs))
    contexts = [counterfactual_context(records[n], records[p].observation, env.placeholder) for p, n in pairs]
    cf_ids, cf_mask = ctx.policy.encode_prompts(contexts)
    response = batch.response_ids[index].to(ctx.policy.device), batch.response_mask[index].to(ctx.policy.device)
    real = ctx.policy.forward_logp(batch.prompt_ids[index].to(ctx.policy.device),
                                   batch.prompt_mask[index].to(ctx.policy.device), *response)["logp"]
    cf = ctx.policy.forward_logp(cf_ids, cf_mask, *response)["logp"]
    gain[prev] = counterfactual_gain(real, cf, response[1]).float().cpu()
    return {"info_gain": gain}


def memory_context(prompt: str, memory: str) -> str:
    """The memory probe's context: only the task and the memory, ``"<question>|m:<memory>|"``."""
    return TURN_SEP.join([prompt, f"m:{memory}"]) + TURN_SEP


@register_provider("memory_utility", check=answer_probe_missing)
@torch.no_grad()
def memory_utility(ctx: ProviderContext, rollouts) -> dict[str, Tensor]:
    """``memory_utility`` ``[N]``: HiMPO's local utility of each memory write (0 on other rows)."""
    records = turn_records(rollouts, "memory_utility")
    writes = [i for i, r in enumerate(records) if r.info.get("memory_write")]
    utility = torch.zeros(len(records))
    if not writes:
        return {"memory_utility": utility}
    chosen = [records[i] for i in writes]
    _probe_parts(chosen, "memory_utility")
    contexts = [memory_context(r.prompt, r.info[key]) for key in ("memory_before", "memory_after") for r in chosen]
    rec = answer_logp(ctx.policy, contexts, [r.probe_prefix for r in chosen] * 2, [r.gold for r in chosen] * 2)
    utility[writes] = (rec[len(chosen):] - rec[: len(chosen)]).float().cpu()
    return {"memory_utility": utility}

