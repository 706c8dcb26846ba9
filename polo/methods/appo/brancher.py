"""APPO's token branching: continuations from inside each root episode's actions, after the token with the highest
branching score (``tree: {name: appo}``; the ``appo`` advantage reads ``branch``, ``branch_token`` and
``branch_scale``).

Over each root episode's generated tokens (its actions in order, stop tokens excluded: a branch after one would
continue a finished action) the branching score ``BS_k = Ĥ_k·Ω̂_k`` (min-max normalized sampling entropy times
the normalized discounted sum of the next ``window`` tokens' log-ratios ``log π_θ − log π_ref``, the reference
role's; ``polo.methods.appo.advantage.branch_scores``) picks one position b; ``branches`` children start from the state
before b's turn (``Episode.branch``), keep b's action up to and including b (forced, mask 0) and sample the rest of the episode.
"""
from __future__ import annotations

import torch
from pydantic import Field

from polo.methods.appo.advantage import branch_scores, procedure_scale, select_branch_points
from polo.engines.branches import BRANCHERS, Brancher, Player
from polo.engines.episodes import Episode, Tree


@BRANCHERS.register("appo")
class TokenBranches(Brancher):
    """Continuations after each root episode's token with the highest entropy × future-likelihood-gain score
    (against the reference policy)."""

    paper = "Agentic Procedural Policy Optimization (arXiv:2606.12384)"
    provenance = "SECONDARY"
    writes = {"branch": -1, "branch_token": 0, "branch_scale": 1.0, "branch_entropy": 0.0}
    reads_entropy = True
    engine_keys = {"token_branches": "branches", "branch_window": "window", "branch_gamma": "gamma",
                   "branch_alpha": "alpha"}

    branches: int = Field(3, ge=1)
    """Continuations from each root episode's branch point."""
    window: int = Field(32, ge=1)
    """Tokens W in the future likelihood gain Ω_k."""
    gamma: float = Field(0.9, ge=0, le=1)
    """Discount γ_Ω inside Ω_k."""
    alpha: float = Field(1.0, ge=0)
    """The branch group's advantage is scaled by 1 + α·Ω̂_b."""

    def roles(self) -> set[str]:
        """The branching score reads the frozen reference policy."""
        return {"reference"}

    def grow(self, engine: Player, policy, tree: Tree, generator: torch.Generator) -> None:
        """Play the continuations and add them to the tree; ``branch``, ``branch_scale`` (``1 + α·Ω̂_b``) and
        ``branch_entropy`` (b's sampling entropy over the episode's mean) go on the branch point's row, the root's
        later rows and every child's rows, ``branch_token`` (b's column + 1) on the branch point's row."""
        reference = engine.settings.models.get("reference")
        if reference is None:
            raise ValueError("engine multi_turn: tree appo needs the reference role's model")
        tokens: dict[int, list[tuple]] = {}
        stops = torch.tensor(policy.stop_token_ids)
        for call in tree.root_calls:
            out = call["out"]
            candidate = out.response_mask.bool() & ~torch.isin(out.response_ids, stops)  # a stop token ends the action
            with torch.no_grad():
                ref = reference.forward_logp(call["prompt_ids"], call["prompt_mask"], out.response_ids,
                                             out.response_mask, temperature=engine.settings.temperature)["logp"]
            lam = out.logp - ref.to(out.logp)
            for b, record in enumerate(call["records"]):
                for col in candidate[b].nonzero().squeeze(-1).tolist():
                    tokens.setdefault(record.traj, []).append(
                        (record.step, col, float(out.entropy[b, col]), float(lam[b, col]), out.response_ids[b]))
        task, children, prefix, next_traj, branch_id = engine.settings.task, [], {}, tree.next_traj(), 0
        for ep in tree.roots:
            seq = tokens.get(ep.traj, [])
            if len(seq) < 2:
                continue
            entropy = torch.tensor([t[2] for t in seq])
            lam = torch.tensor([t[3] for t in seq])
            _, _, omega_hat, bs = branch_scores(entropy, lam, self.window, self.gamma)
            point = select_branch_points(bs, 1, 1)[0]
            step, col, _, _, response = seq[point]
            scale = float(procedure_scale(omega_hat, [point], self.alpha)[0])
            mean_entropy = float(entropy.mean())
            ratio = float(entropy[point]) / mean_entropy if mean_entropy > 0 else 1.0
            point_values = {"branch": branch_id, "branch_scale": scale, "branch_entropy": ratio}
            values = {f"branch_token@{step}": col + 1}
            for later in range(step, len(ep.history)):
                values.update({f"{name}@{later}": value for name, value in point_values.items()})
            tree.extras.setdefault(ep.traj, {}).update(values)
            for _ in range(self.branches):
                children.append(Episode.branch(task.make_env(), ep, step, next_traj))
                prefix[next_traj] = response[: col + 1].tolist()
                tree.extras[next_traj] = dict(point_values)
                tree.group_of[next_traj] = tree.group_of[ep.traj]
                next_traj += 1
            branch_id += 1
        if children:
            tree.calls += engine.play(policy, children, generator, greedy=False, action_prefix=prefix)
            tree.episodes += children
