"""The policy's own stand-ins for two environment oracles, computed from counterfactual probes of the step rows.

* ``probe_uses_support`` / ``probe_uses_failed`` (IAPO's influence graph, instead of the environment's
  ``depends_on`` edges): for every row t and every earlier turn j of its trajectory, the influence
  ``I_{j→t} = (1/n_t) Σ_k [log π(a_{t,k} | c_t) − log π(a_{t,k} | c_t with o_j → placeholder)]`` of
  observation o_j on the action a_t (n_t tokens), the placeholder being the environment's uninformative
  observation length-matched to o_j, as in InfoPO's probe (``counterfactual_gain``). The counterfactual
  context is the engine's rendering of the trajectory's history with o_j replaced; a turn whose o_j is out of
  the context window, or already equals the placeholder, has ``I = 0`` without a forward. An edge j → t when
  ``I_{j→t} > τ`` (``influence_threshold`` of the component that reads the inputs): showing o_j made the action
  more likely by more than τ nats per token. The edge is a support use when turn j's step succeeded (its
  ``valid`` flag set and no ``tool_error``: the step contract's own flags, no oracle), a failed use otherwise.
  A failed observation that already is the placeholder (KBLookup's ``none``) carries nothing to mask, so it
  gives no edge: unlike the oracle, the probe does not count a retry after it as a failed use.
  Where every row also carries the oracle's ``depends_on``, the step's metrics get the agreement of the two
  edge sets over all (j, t) pairs (``iapo/probe_oracle_agreement``) and Cohen's κ against the agreement of
  independent edge sets with the same rates (``iapo/probe_oracle_kappa``; > 0: better than chance);
  always ``iapo/probe_edge_frac`` (share of pairs with an edge).
* ``probe_relevance`` (HiMPO's hindsight relevance, instead of the share of gold evidence words): a memory
  write is relevant in hindsight when it supports what the episode went on to do. With ``ℓ(m)`` the mean
  log-prob of the trajectory's final action after only the task and memory m (``"<question>|m:<m>|"``, the
  memory probe's context), ``ρ = clip((ℓ(m_after) − ℓ(m_before)) / −ℓ(m_before), 0, 1)``: the share of the
  final action's surprisal that the write removed. 0 on other rows and on a write that is its trajectory's last
  turn (nothing followed it). Where the environment reports ``memory_relevance``, the metrics get the Pearson
  correlation of the two over the writes (``himpo/probe_oracle_corr``) and ``himpo/probe_relevance_mean``.

No-grad forwards of the current policy at temperature 1, each probe one batched call over all its contexts.
"""
from __future__ import annotations

import torch
from torch import Tensor

from polo.core.advantages.iapo import INFLUENCE_THRESHOLD
from polo.core.advantages.infopo import counterfactual_gain
from polo.engines.episodes import Episode, TurnRecord
from polo.inputs.agent_probes import answer_logp, matched_placeholder, memory_context, turn_records
from polo.inputs.base import ProviderContext, component_setting, register_provider
from polo.tasks.base import Example

KINDS = {"support": 1, "failed": 2}
"""Edge kind codes of a (j, t) pair; 0: no edge."""


def _same(a: str | Example, b: str | Example) -> bool:
    """Whether two contexts (texts, or chat Examples compared by prompt and messages) are the same."""
    if isinstance(a, Example) or isinstance(b, Example):
        return isinstance(a, Example) and isinstance(b, Example) and (a.prompt, a.messages) == (b.prompt, b.messages)
    return a == b


def influence_pairs(ctx: ProviderContext, records: list[TurnRecord]) -> tuple[list[tuple[int, int]], list]:
    """Every (row t, earlier turn j) pair of a trajectory and the counterfactual context of each (None where
    replacing o_j leaves the context unchanged). Rebuilds each row's context from its trajectory's history
    with the engine's rendering; ValueError when a turn is missing or the rebuilt context differs."""
    row_of = {(r.traj, r.step): i for i, r in enumerate(records)}
    envs: dict[int, object] = {}
    pairs, contexts = [], []
    for t, r in enumerate(records):
        if r.step == 0:
            continue
        missing = [s for s in range(r.step) if (r.traj, s) not in row_of]
        if missing:
            raise ValueError(f"influence probe: trajectory {r.traj} has a row for turn {r.step} but none for turns "
                             f"{missing}; it needs every turn of a trajectory as a row (root episodes, no branches)")
        if r.seed not in envs:
            env = ctx.task.make_env()
            env.reset(r.seed)
            envs[r.seed] = env
        chat = isinstance(r.context, Example)
        history = [(records[row_of[r.traj, s]].action, records[row_of[r.traj, s]].observation) for s in range(r.step)]
        if not _same(ctx.engine.context(Episode(envs[r.seed], r.seed, r.traj, list(history)), chat), r.context):
            raise ValueError(f"influence probe: the context of turn {r.step} (seed {r.seed}) is not the engine's "
                             "rendering of its history; it needs an environment whose context is its plain history")
        for j, (action, observation) in enumerate(history):
            cf = history[:j] + [(action, matched_placeholder(envs[r.seed].placeholder, observation))] + history[j + 1:]
            context = ctx.engine.context(Episode(envs[r.seed], r.seed, r.traj, cf), chat)
            pairs.append((t, j))
            contexts.append(None if _same(context, r.context) else context)
    return pairs, contexts


def edge_agreement(probe: Tensor, oracle: Tensor) -> tuple[float, float]:
    """``(agreement, κ)`` of two edge-kind codes per pair: the share of pairs of equal kind, and Cohen's
    ``κ = (agreement − chance)/(1 − chance)`` with ``chance = Σ_kind p_probe(kind)·p_oracle(kind)`` (0 when
    chance is 1: a single kind everywhere tells nothing)."""
    agreement = float((probe == oracle).double().mean())
    n = len(KINDS) + 1
    chance = float((torch.bincount(probe, minlength=n) * torch.bincount(oracle, minlength=n)).sum()) / len(probe) ** 2
    return agreement, (agreement - chance) / (1 - chance) if chance < 1 else 0.0


def observation_influence(ctx: ProviderContext, rollouts, records: list[TurnRecord]) -> tuple[list, Tensor]:
    """``(pairs, I)``: every (row t, earlier turn j) pair of a trajectory (``influence_pairs``) and the influence
    ``I_{j→t}`` ``[n_pairs]`` of o_j on a_t, one batched forward over the rows' real and counterfactual contexts."""
    pairs, contexts = influence_pairs(ctx, records)
    influence = torch.zeros(len(pairs))
    probed = [k for k, c in enumerate(contexts) if c is not None]
    if not probed:
        return pairs, influence
    rows = sorted({pairs[k][0] for k in probed})
    where = {t: i for i, t in enumerate(rows)}
    batch, policy = rollouts.batch, ctx.policy
    index = rows + [pairs[k][0] for k in probed]
    ids, mask = policy.encode_prompts([records[t].context for t in rows] + [contexts[k] for k in probed])
    response = batch.response_ids[index].to(policy.device), batch.response_mask[index].to(policy.device)
    logp = policy.forward_logp(ids.to(policy.device), mask.to(policy.device), *response)["logp"]
    real = logp[[where[pairs[k][0]] for k in probed]]
    influence[probed] = counterfactual_gain(real, logp[len(rows):], response[1][len(rows):]).float().cpu()
    return pairs, influence


def history_render_missing(task) -> str | None:
    """What an environment task lacks for the influence probe: a context that is its plain history (where one
    observation can be masked); None when it has one, or is no environment task (``turn_records`` then refuses)."""
    if not hasattr(task, "make_env"):
        return None
    env = task.make_env()
    if env.plain_history:
        return None
    return (f"environment {env.name} renders its own context, not its plain history (plain_history is False), so "
            f"the influence probe cannot mask one observation: use influence: oracle")


@register_provider("probe_uses_support", "probe_uses_failed", check=history_render_missing)
@torch.no_grad()
def influence_edges(ctx: ProviderContext, rollouts) -> dict[str, Tensor]:
    """``probe_uses_support`` and ``probe_uses_failed`` ``[N]`` int64 bitmasks: IAPO's influence graph read off
    the policy (see the module docstring)."""
    records = turn_records(rollouts, "probe_uses_support")
    threshold = component_setting(ctx.components.values(), "influence_threshold", INFLUENCE_THRESHOLD)
    pairs, influence = observation_influence(ctx, rollouts, records)
    n = len(records)
    support, failed = torch.zeros(n, dtype=torch.long), torch.zeros(n, dtype=torch.long)
    if not pairs:
        ctx.metrics["iapo/probe_edge_frac"] = 0.0
        return {"probe_uses_support": support, "probe_uses_failed": failed}
    target, source = (torch.tensor(x) for x in zip(*pairs))
    flags = torch.tensor([not r.info["valid"] or bool(r.info["tool_error"]) for r in records])
    row_of = {(r.traj, r.step): i for i, r in enumerate(records)}
    source_failed = flags[[row_of[records[t].traj, j] for t, j in pairs]]
    edge = influence > threshold
    kind = torch.where(edge, torch.where(source_failed, KINDS["failed"], KINDS["support"]), 0)
    bit = torch.ones_like(source) << source
    support.index_add_(0, target, torch.where(kind == KINDS["support"], bit, 0))
    failed.index_add_(0, target, torch.where(kind == KINDS["failed"], bit, 0))
    ctx.metrics["iapo/probe_edge_frac"] = float(edge.double().mean())
    if all("depends_on" in r.info for r in records):
        agreement, kappa = edge_agreement(kind, oracle_kinds(records, pairs))
        ctx.metrics["iapo/probe_oracle_agreement"] = agreement
        ctx.metrics["iapo/probe_oracle_kappa"] = kappa
    return {"probe_uses_support": support, "probe_uses_failed": failed}


def oracle_kinds(records: list[TurnRecord], pairs: list[tuple[int, int]]) -> Tensor:
    """The kind code of each (row t, turn j) pair in the environment's ``depends_on`` edges of row t."""
    edges = [dict(r.info["depends_on"]) for r in records]
    return torch.tensor([KINDS.get(edges[t].get(j), 0) for t, j in pairs], dtype=torch.long)


@register_provider("probe_relevance")
@torch.no_grad()
def hindsight_relevance(ctx: ProviderContext, rollouts) -> dict[str, Tensor]:
    """``probe_relevance`` ``[N]`` in [0, 1]: HiMPO's hindsight relevance of each memory write read off the
    policy (see the module docstring); 0 on other rows."""
    records = turn_records(rollouts, "probe_relevance")
    last: dict[int, TurnRecord] = {}
    for r in records:
        if r.traj not in last or r.step > last[r.traj].step:
            last[r.traj] = r
    writes = [i for i, r in enumerate(records) if r.info.get("memory_write") and last[r.traj] is not r]
    relevance = torch.zeros(len(records))
    if writes:
        chosen = [records[i] for i in writes]
        contexts = [memory_context(r.prompt, r.info[key]) for key in ("memory_before", "memory_after") for r in chosen]
        finals = [last[r.traj].action for r in chosen] * 2
        logp = answer_logp(ctx.policy, contexts, [""] * len(contexts), finals).float().cpu()
        before, after = logp[: len(chosen)], logp[len(chosen):]
        relevance[writes] = ((after - before) / (-before).clamp_min(1e-6)).clamp(0, 1)
    written = [i for i, r in enumerate(records) if r.info.get("memory_write")]
    if written:
        ctx.metrics["himpo/probe_relevance_mean"] = float(relevance[written].mean())
        if len(written) > 1 and all("memory_relevance" in records[i].info for i in written):
            oracle = torch.tensor([float(records[i].info["memory_relevance"]) for i in written])
            pair = torch.stack([relevance[written], oracle])
            ctx.metrics["himpo/probe_oracle_corr"] = float(torch.corrcoef(pair)[0, 1].nan_to_num(0.0))
    return {"probe_relevance": relevance}
