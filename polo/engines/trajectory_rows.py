"""The trajectory-row view of multi-turn rollouts: one row per trajectory, ``prompt|a0|o0|a1|o1|...``.

The ``multi_turn`` engine trains on step rows (one row per turn, the context as rendered when the action was
sampled). The same ``TurnRecord``s also give the interleaved view that flattening estimators and analyses
use: per trajectory, the opening prompt, then each turn's action tokens exactly as sampled (the step row's
response) and its observation, as token spans of kind PROMPT, ACTION, OBSERVATION or HINT. Only ACTION spans
a trajectory sampled itself are trainable: a branch's copied prefix (its parent's turns) is laid out too but
owned by the parent, so across the view every sampled token is trainable exactly once.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from polo.envs import ACTION_SEP, TURN_SEP
from polo.policy.inputs import pad_sequences
from polo.engines.base import Rollouts

@dataclass(frozen=True)
class TokenSpan:
    """Tokens ``[start, end)`` of a trajectory row: PROMPT, ACTION, MEMORY, ANSWER, OBSERVATION or HINT."""

    start: int
    end: int
    kind: str
    trainable: bool


@dataclass
class TrajectoryRows:
    """``[B, L]`` tensors, right-padded, one row per trajectory id in ``traj`` order."""

    traj: list[int]
    input_ids: Tensor
    attention_mask: Tensor
    loss_mask: Tensor  # 1 on the trainable generated tokens (ACTION, MEMORY, ANSWER spans the row sampled)
    turn_idx: Tensor  # the turn of each generated token, −1 elsewhere
    old_logp: Tensor  # behaviour log-probs of generated tokens (copied ones included), 0 elsewhere
    spans: list[list[TokenSpan]]


def trajectory_rows(rollouts: Rollouts, policy) -> TrajectoryRows:
    """The trajectory-row view of a multi-turn ``Rollouts`` (see the module docstring)."""
    if rollouts.turns is None:
        raise ValueError("trajectory_rows needs multi-turn rollouts (Rollouts.turns); use engine: multi_turn")
    batch, records = rollouts.batch, rollouts.turns
    row_of = {(r.traj, r.step): i for i, r in enumerate(records)}
    parent = {r.traj: r.parent for r in records}
    first: dict[int, int] = {}
    for r in records:
        first[r.traj] = min(first.get(r.traj, r.step), r.step)
    encode = lambda text: policy.tokenizer(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    out_ids, out_loss, out_turn, out_logp, out_spans, order = [], [], [], [], [], sorted(parent)
    for traj in order:
        prompt_ids = policy.encode_prompts([records[row_of[traj, first[traj]]].prompt + TURN_SEP])[0][0].tolist()
        ids, loss, turn, logp = list(prompt_ids), [0] * len(prompt_ids), [-1] * len(prompt_ids), [0.0] * len(prompt_ids)
        spans = [TokenSpan(0, len(ids), "PROMPT", False)]
        step = 0
        while (owner := _owner(first, parent, row_of, traj, step)) is not None:
            i = row_of[owner, step]
            mask = batch.response_mask[i].bool()
            action = batch.response_ids[i][mask].tolist()
            own = owner == traj
            record = records[i]
            kind = "MEMORY" if record.info.get("memory_write") else "ANSWER" if record.terminated else "ACTION"
            spans.append(TokenSpan(len(ids), len(ids) + len(action), kind, own))
            ids += action
            loss += [int(own)] * len(action)
            turn += [step] * len(action)
            logp += batch.old_logp[i][mask].tolist()
            observation = encode(ACTION_SEP + record.observation + TURN_SEP)
            kind = "HINT" if ", hint:" in record.observation else "OBSERVATION"
            spans.append(TokenSpan(len(ids), len(ids) + len(observation), kind, False))
            ids += observation
            loss += [0] * len(observation)
            turn += [-1] * len(observation)
            logp += [0.0] * len(observation)
            step += 1
        out_ids.append(ids), out_loss.append(loss), out_turn.append(turn), out_logp.append(logp)
        out_spans.append(spans)
    input_ids, attention = pad_sequences(out_ids, policy.pad_token_id, left=False)
    loss_mask, _ = pad_sequences(out_loss, 0, left=False)
    turn_idx, _ = pad_sequences(out_turn, -1, left=False)
    width = input_ids.shape[1]
    old_logp = torch.tensor([row + [0.0] * (width - len(row)) for row in out_logp])
    return TrajectoryRows(order, input_ids, attention, loss_mask, turn_idx, old_logp, out_spans)


def _owner(first: dict[int, int], parent: dict[int, int], row_of: dict, traj: int, step: int) -> int | None:
    """The trajectory whose row holds turn ``step`` on ``traj``'s path (itself from its first own turn on, an
    ancestor before it), or None past the path's end."""
    while traj != -1:
        if step >= first[traj]:
            return traj if (traj, step) in row_of else None
        traj = parent.get(traj, -1)
    return None
