"""Rollout trees for the ``multi_turn`` engine: sibling branches at observation events (OPO), counterfactual
replays of a tool-granularity decision (CIPO), hinted recovery branches from erroneous states (ReflectPO) and
continuations from high-scoring token positions (APPO).

Both branch from a turn of a played root episode: ``Episode.branch`` replays the root's earlier turns in a
fresh environment, so a branch owns only the turns it samples (the copied prefix is never a row of the
branch, hence never trained twice). A sibling also branches inside the action: the tool name (``s:``) is
forced and only the argument is re-sampled, the forced tokens coming back with mask 0. The G siblings of one
event share one context, so the sampler runs its prefill once for all of them.

Both passes write per-row inputs through ``extras`` (``{traj: {"<name>@<step>": value}}`` for one row,
``{traj: {name: value}}`` for every row of a trajectory); rows they do not name take ``ADDED_DEFAULTS``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from polo.core.advantages.opo_observation import jaccard_redundancy, select_events
from polo.engines.episodes import Episode

if TYPE_CHECKING:
    from polo.engines.multi_turn import MultiTurn

ADDED_DEFAULTS = {"branch": -1, "sibling": 0.0, "arg_start": 0, "cf_decision": 0.0, "cf_delta": 0.0,
                  "branch_token": 0, "branch_scale": 1.0}
COUNTERFACTUAL_TRAJ = 10**9
"""Trajectory ids of counterfactual replays (never rows) start here, clear of the batch's own ids."""


def _tokens(policy, text: str) -> int:
    return len(policy.tokenizer(text, add_special_tokens=False)["input_ids"])


def observation_siblings(engine: "MultiTurn", policy, episodes: list[Episode], calls: list[dict],
                         generator: torch.Generator, extras: dict, group_of: dict[int, int]) -> list[dict]:
    """OPO's observation branching. Per root episode, its observation events (turns whose action is an
    information-fetching call, ``env.observation_argument``) are scored: uncertainty = the mean sampling
    entropy of the argument's tokens, redundancy = the largest word overlap of the argument with an earlier
    event's; the top ``branch_events`` eligible ones get ``observation_branches`` siblings, each the same
    context with the tool name forced and the argument re-sampled, stepped once. Returns the siblings'
    decoding calls; writes ``branch``, ``sibling`` and ``arg_start`` into ``extras`` and the siblings' groups
    into ``group_of``."""
    entropy = {}
    for call in calls:
        for b, record in enumerate(call["records"]):
            entropy[id(record)] = call["out"].entropy[b]
    task, siblings, prefix, next_traj, branch_id = engine.settings.task, [], {}, max(group_of) + 1, 0
    for ep in episodes:
        events = [(r, n) for r in ep.records if (n := ep.env.observation_argument(r.action)) is not None]
        if not events:
            continue
        starts = [_tokens(policy, r.action[:n]) for r, n in events]
        ends = [_tokens(policy, r.action) for r, _ in events]
        uncertainty = [float(entropy[id(r)][a:e].mean()) if e > a else 0.0
                       for (r, _), a, e in zip(events, starts, ends)]
        redundancy = jaccard_redundancy([r.action[n:] for r, n in events])
        for i in select_events(uncertainty, redundancy, engine.branch_uncertainty, engine.branch_redundancy,
                               engine.branch_events):
            record, n = events[i]
            extras.setdefault(ep.traj, {}).update({f"branch@{record.step}": branch_id,
                                                   f"arg_start@{record.step}": starts[i]})
            for _ in range(engine.observation_branches):
                sibling = Episode.branch(task.make_env(), ep, record.step, next_traj)
                extras[next_traj] = {"branch": branch_id, "sibling": 1.0, "arg_start": starts[i]}
                group_of[next_traj], prefix[next_traj] = group_of[ep.traj], record.action[:n]
                siblings.append(sibling)
                next_traj += 1
            branch_id += 1
    if not siblings:
        return []
    return engine.play(policy, siblings, generator, greedy=False, max_turns=1, action_prefix=prefix)


def counterfactual_gains(engine: "MultiTurn", policy, episodes: list[Episode], generator: torch.Generator,
                         extras: dict) -> None:
    """CIPO's counterfactual imagination. Per root episode, the first turn t* whose action has an alternative
    at the other tool granularity in the state it was taken in (``env.alternative``) is replayed with that
    alternative and the policy finishes the episode; ``cf_delta`` = R − R^cf and ``cf_decision`` = 1 go on
    row t*. The replays are not rows (they only score the decision)."""
    task, replays, decisions = engine.settings.task, [], []
    for ep in episodes:
        for t, (action, _) in enumerate(ep.history):
            alternative = Episode.branch(task.make_env(), ep, t, -1).env.alternative(action)
            if alternative is not None:
                replays.append(Episode.branch(task.make_env(), ep, t + 1, COUNTERFACTUAL_TRAJ + len(replays),
                                              replace_last=alternative))
                decisions.append((ep, t))
                break
    engine.play(policy, replays, generator, greedy=False)
    for (ep, t), replay in zip(decisions, replays):
        extras.setdefault(ep.traj, {}).update({f"cf_decision@{t}": 1.0,
                                               f"cf_delta@{t}": ep.episode_return - replay.episode_return})


def _clean(action: str) -> str:
    """An action quoted inside a hint, without the separators of the rendered context."""
    return action.replace("|", " ").replace(";", " ").strip()


def recovery_hint(record, seen: set[str]) -> str | None:
    """ReflectPO's hint for the state a turn led to, or None when that state is not erroneous: the result of an
    invalid action or a failed tool call, or a repeated visit (the turn's observation is one of ``seen``, the
    states already acted in on this path, this turn's included)."""
    if not record.info["valid"]:
        return f"hint: {_clean(record.action)} is not a valid action, try another"
    if record.info["tool_error"]:
        return f"hint: {_clean(record.action)} found nothing, try another"
    if record.observation in seen:
        return f"hint: you were here before, {_clean(record.action)} did not help, try another"
    return None


def recovery_branches(engine: "MultiTurn", policy, episodes: list[Episode], generator: torch.Generator,
                      group_of: dict[int, int]) -> tuple[list[Episode], list[dict]]:
    """ReflectPO's reflection-guided sampling. In each root episode, the states its turns led to are checked in
    order: a repeated visit (the state was already acted in on the path) or the result of an invalid action or
    a failed tool call is erroneous. From up to ``max_branch_points`` erroneous states per task, ``recovery_branches``
    children replay the path to that state, read a hint appended to its observation (never trainable: it is in
    the context) and finish the episode with the policy. Returns the children and their decoding calls."""
    task, children, next_traj = engine.settings.task, [], max(group_of) + 1
    budget: dict[int, int] = {}
    for ep in episodes:
        seen = set()
        for record in ep.records:
            seen.add(record.info["anchor_obs"])
            hint = recovery_hint(record, seen)
            group = group_of[ep.traj]
            if hint is None or record.terminated or record.truncated or budget.get(group, 0) >= engine.max_branch_points:
                continue
            budget[group] = budget.get(group, 0) + 1
            for _ in range(engine.recovery_branches):
                children.append(Episode.branch(task.make_env(), ep, record.step + 1, next_traj, hint=hint))
                group_of[next_traj] = group
                next_traj += 1
    calls = engine.play(policy, children, generator, greedy=False) if children else []
    return children, calls


def token_branches(engine: "MultiTurn", policy, episodes: list[Episode], calls: list[dict],
                   generator: torch.Generator, extras: dict, group_of: dict[int, int]) -> tuple[list[Episode], list[dict]]:
    """APPO's branching. Over each root episode's generated tokens (its actions in order, stop tokens excluded:
    a branch after one would continue a finished action) the branching score
    ``BS_k = Ĥ_k·Ω̂_k`` (min-max normalized sampling entropy times the normalized discounted sum of the next
    ``branch_window`` tokens' log-ratios ``log π_θ − log π_ref``, the reference role's) picks one position b;
    ``token_branches`` children replay the turns before b's turn, keep b's action up to and including b and
    sample the rest of the episode. Writes ``branch``, ``branch_token`` and ``branch_scale`` (``1 + α·Ω̂_b``)."""
    from polo.core.advantages.appo import branch_scores, procedure_scale, select_branch_points

    reference = engine.settings.models.get("reference")
    if reference is None:
        raise ValueError("engine multi_turn: token_branches needs the reference role's model")
    tokens: dict[int, list[tuple]] = {}
    stops = torch.tensor(policy.stop_token_ids)
    for call in calls:
        out = call["out"]
        candidate = out.response_mask.bool() & ~torch.isin(out.response_ids, stops)  # a stop token ends the action
        with torch.no_grad():
            ref = reference.forward_logp(call["prompt_ids"], call["prompt_mask"], out.response_ids, out.response_mask,
                                         temperature=engine.settings.temperature)["logp"]
        lam = out.logp - ref.to(out.logp)
        for b, record in enumerate(call["records"]):
            for col in candidate[b].nonzero().squeeze(-1).tolist():
                tokens.setdefault(record.traj, []).append(
                    (record.step, col, float(out.entropy[b, col]), float(lam[b, col]), out.response_ids[b]))
    task, children, prefix, next_traj, branch_id = engine.settings.task, [], {}, max(group_of) + 1, 0
    for ep in episodes:
        seq = tokens.get(ep.traj, [])
        if len(seq) < 2:
            continue
        entropy = torch.tensor([t[2] for t in seq])
        lam = torch.tensor([t[3] for t in seq])
        _, _, omega_hat, bs = branch_scores(entropy, lam, engine.branch_window, engine.branch_gamma)
        point = select_branch_points(bs, 1, 1)[0]
        step, col, _, _, response = seq[point]
        scale = float(procedure_scale(omega_hat, [point], engine.branch_alpha)[0])
        values = {f"branch@{step}": branch_id, f"branch_token@{step}": col + 1, f"branch_scale@{step}": scale}
        for later in range(step + 1, len(ep.history)):
            values.update({f"branch@{later}": branch_id, f"branch_scale@{later}": scale})
        extras.setdefault(ep.traj, {}).update(values)
        for _ in range(engine.token_branches):
            children.append(Episode.branch(task.make_env(), ep, step, next_traj))
            prefix[next_traj] = response[: col + 1].tolist()
            extras[next_traj] = {"branch": branch_id, "branch_scale": scale}
            group_of[next_traj] = group_of[ep.traj]
            next_traj += 1
        branch_id += 1
    calls = engine.play(policy, children, generator, greedy=False, action_prefix=prefix) if children else []
    return children, calls
