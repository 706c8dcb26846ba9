"""OPO's observation branching: siblings that re-sample the argument of a root episode's most uncertain, least
redundant observation calls (``tree: {name: opo_observation}``; the ``opo_observation`` advantage reads them).

Per root episode, its observation events (turns whose action is an information-fetching call,
``env.observation_argument``) are scored: uncertainty = the mean sampling entropy of the argument's tokens,
redundancy = the largest word overlap of the argument with an earlier event's (``jaccard_redundancy``). The top
``events`` eligible ones (``select_events``) get ``branches`` siblings each: the event's context with the tool
name forced (it comes back with mask 0) and only the argument re-sampled, stepped once. The siblings of one event
share its context, so the sampler prefills it once for all of them. A sibling is a partial trajectory: its row's
reward is its step reward.
"""
from __future__ import annotations

import torch
from pydantic import Field

from polo.methods.opo_observation.advantage import jaccard_redundancy, select_events
from polo.engines.branches import BRANCHERS, Brancher, Player
from polo.engines.episodes import Episode, Tree


def _tokens(policy, text: str) -> int:
    """The number of tokens ``text`` encodes to, without special tokens."""
    return len(policy.tokenizer(text, add_special_tokens=False)["input_ids"])


@BRANCHERS.register("opo_observation")
class ObservationSiblings(Brancher):
    """Siblings of the most uncertain, least redundant observation calls: the tool name kept, the argument
    re-sampled, one step."""

    paper = "Learning Where to Look (OPO, Observation Policy Optimization; arXiv id not found)"
    provenance = "RECONSTRUCTED"
    writes = {"branch": -1, "sibling": 0.0, "arg_start": 0}
    reads_entropy = True
    engine_keys = {"observation_branches": "branches", "branch_events": "events", "branch_uncertainty": "uncertainty",
                   "branch_redundancy": "redundancy"}

    branches: int = Field(3, ge=1)
    """Re-sampled siblings (argument only, one step) per chosen observation event."""
    events: int = Field(1, ge=1)
    """Observation events branched per episode (the highest uncertainty × (1 − redundancy))."""
    uncertainty: float = Field(1.0, ge=0)
    """An event is eligible when its argument tokens' mean sampling entropy (nats) is at least this."""
    redundancy: float = Field(0.5, ge=0, le=1)
    """... and its argument's word overlap (Jaccard) with earlier arguments is at most this."""

    def branch_point(self, episode: Episode, action: str) -> bool:
        """The state before an observation call (an event's siblings start there)."""
        return episode.env.observation_argument(action) is not None

    def grow(self, engine: Player, policy, tree: Tree, generator: torch.Generator) -> None:
        """Play the siblings; ``branch`` and ``arg_start`` go on the event's row and on every sibling's,
        ``sibling`` = 1 on the siblings'."""
        entropy = {}
        for call in tree.root_calls:
            for b, record in enumerate(call["records"]):
                entropy[id(record)] = call["out"].entropy[b]
        task, siblings, prefix, next_traj, branch_id = engine.settings.task, [], {}, tree.next_traj(), 0
        for ep in tree.roots:
            events = [(r, n) for r in ep.records if (n := ep.env.observation_argument(r.action)) is not None]
            if not events:
                continue
            starts = [_tokens(policy, r.action[:n]) for r, n in events]
            ends = [_tokens(policy, r.action) for r, _ in events]
            uncertainty = [float(entropy[id(r)][a:e].mean()) if e > a else 0.0
                           for (r, _), a, e in zip(events, starts, ends)]
            redundancy = jaccard_redundancy([r.action[n:] for r, n in events])
            for i in select_events(uncertainty, redundancy, self.uncertainty, self.redundancy, self.events):
                record, n = events[i]
                tree.extras.setdefault(ep.traj, {}).update({f"branch@{record.step}": branch_id,
                                                            f"arg_start@{record.step}": starts[i]})
                for _ in range(self.branches):
                    siblings.append(Episode.branch(task.make_env(), ep, record.step, next_traj))
                    tree.extras[next_traj] = {"branch": branch_id, "sibling": 1.0, "arg_start": starts[i]}
                    tree.group_of[next_traj], prefix[next_traj] = tree.group_of[ep.traj], record.action[:n]
                    next_traj += 1
                branch_id += 1
        if siblings:
            tree.calls += engine.play(policy, siblings, generator, greedy=False, max_turns=1, action_prefix=prefix)
