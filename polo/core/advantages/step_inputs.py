"""The step-row inputs of multi-turn estimators: their names, meanings, one checked accessor and the checks
that the estimators on step rows share.

A multi-turn engine writes one batch row per (episode, turn) and these ``[N]`` tensors into ``extras``
(``multi_turn`` writes the environment-independent ones always and an oracle when the environment reports
it); the probe inputs (``gold_logp``, ``info_gain``, ``memory_utility``, ``probe_uses_*``, ``probe_relevance``)
and the judge role's ``turn_judge`` come from input providers. An estimator declares the names it reads in ``requires``/``needs()`` and reads each
with ``step_input`` (``binary_input`` for a 0/1 flag), the episode reward with ``episode_reward`` and the
trajectory index of its rows with ``trajectories``.
"""
from __future__ import annotations

import torch
from torch import Tensor

from polo.core.agent_primitives import check_steps
from polo.core.batch import RolloutBatch
from polo.core.segment import segment_sum

STEP_INPUTS = {
    "traj": "trajectory id of the row (unique in the batch)",
    "step": "0-based turn index of the row inside its trajectory",
    "anchor": "anchor-state id (equal ids ⇔ identical anchor observation)",
    "next_anchor": "anchor id of the state the turn led to, in the anchor ids' space; -1 = the terminal sink",
    "step_reward": "the environment's immediate reward of the row's turn",
    "action_key": "canonical action id (equal ids ⇔ identical action text)",
    "valid": "1.0 when the action parsed, else 0.0",
    "tool_error": "1.0 when a well-formed tool call found nothing, else 0.0",
    "judge": "the environment's per-turn process score in [0, 1] (GuessNum's judge_score)",
    "turn_judge": "the judge role's score of the row's turn (its context, action and observation) in [0, 1], "
                  "NaN where the judgment failed (the turn_judge provider)",
    "ev": "1.0 when the turn's observation held new gold evidence (KBLookup's evidence oracle)",
    "uses_support": "bitmask: bit j set ⇔ the turn used the successful observation of turn j",
    "uses_failed": "bitmask: bit j set ⇔ the turn used the failed observation of turn j, or retried it",
    "hint": "1.0 when the turn's observation carried a teacher hint (GuessNum with teacher_hints)",
    "memory_write": "1.0 when the turn's action wrote the memory (KBLookup with memory)",
    "memory_relevance": "share of the gold evidence words among the words a memory write added, in [0, 1]",
    "probe_uses_support": "bitmask like uses_support, read off the policy: bit j set ⇔ showing the successful "
                          "observation of turn j raised the turn's action log-prob by more than IAPO's threshold",
    "probe_uses_failed": "bitmask like uses_failed, read off the policy: the same probe on failed observations",
    "probe_relevance": "HiMPO's hindsight relevance read off the policy: the share of the final action's surprisal "
                       "(after task and memory) that the memory write removed, in [0, 1]; 0 on other rows",
    "gold_logp": "mean log-prob of the gold answer's tokens after the row's context and the probe prefix",
    "info_gain": "InfoPO's counterfactual information gain credited to the row's turn (0 without one)",
    "memory_utility": "Rec(memory after the write) - Rec(memory before), 0 on rows that write no memory",
    "branch": "branch-group id: rows sharing it are compared with each other (OPO: an observation event row and "
              "its re-sampled siblings; APPO: a branch point's original continuation, i.e. the branched "
              "trajectory's rows from the branched turn on, and every row of its child continuations); -1 = none",
    "branch_token": "first response column the branch term covers: in APPO's branched trajectory the column after "
                    "the branch token b on its branched-turn row, 0 on every other row",
    "branch_scale": "APPO's procedure-level scale s_b = 1 + α·Ω̂_b of the row's branch point",
    "branch_entropy": "APPO: the sampling entropy of the row's branch token over its episode's mean token entropy",
    "sibling": "1.0 on a re-sampled sibling row (one step, trains its argument tokens only), 0.0 otherwise",
    "arg_start": "response tokens before the action's argument (2 for 's:<name>'); the argument follows",
    "cf_decision": "1.0 on the decision turn that a counterfactual rollout re-played, else 0.0",
    "cf_delta": "R_i - R^cf_i, the outcome gain over the counterfactual, on the decision row; 0.0 elsewhere",
}
INTEGER_INPUTS = frozenset({"traj", "step", "anchor", "next_anchor", "action_key", "uses_support", "uses_failed",
                            "probe_uses_support", "probe_uses_failed", "branch", "branch_token", "arg_start"})


def step_input(batch: RolloutBatch, name: str, who: str, missing_ok: bool = False) -> Tensor:
    """``batch.extras[name]`` checked to be ``[N]``: an integer dtype for ids and bitmasks, finite floating
    point otherwise (``missing_ok``: NaN allowed, marking a missing value such as a failed judgment); ValueError
    naming ``who``, the input and what is expected."""
    N = batch.batch_size
    where = f"{who} needs the step-row input {name!r} [{N}] ({STEP_INPUTS[name]}), written by a multi-turn engine"
    value = batch.require(name, where)
    if value.shape != (N,):
        raise ValueError(f"{where}; got shape {tuple(value.shape)}")
    if name in INTEGER_INPUTS:
        if value.is_floating_point() or value.dtype == torch.bool:
            raise ValueError(f"{where}; got dtype {value.dtype}, expected an integer dtype")
    elif not (torch.isfinite(value.double()) | (missing_ok & value.isnan())).all():
        raise ValueError(f"{where}; it holds {'infinite' if missing_ok else 'non-finite'} values")
    return value


def binary_input(value: Tensor, name: str, who: str) -> Tensor:
    """``value`` (a checked step input holding a 0/1 flag) as a bool tensor; ValueError unless every entry is
    0 or 1."""
    if value.dtype == torch.bool:
        return value
    if not bool(((value == 0) | (value == 1)).all()):
        raise ValueError(f"{who}: the step-row input {name!r} must hold only 0.0 and 1.0 (a flag per row: 0.0 or "
                         "1.0)")
    return value == 1


def episode_reward(batch: RolloutBatch, who: str) -> Tensor:
    """The episode reward of every step row (the weighted total of ``batch.rewards``), ``[N]`` in the mask's
    dtype; ValueError naming ``who`` when any is non-finite."""
    reward = batch.scalar_reward().to(batch.mask)
    if not torch.isfinite(reward).all():
        raise ValueError(f"{who}: the episode rewards (weighted total of batch.rewards) hold non-finite values")
    return reward


def trajectories(traj: Tensor, group: Tensor, who: str, step: Tensor | None = None) -> tuple[Tensor, int, Tensor]:
    """``(trajectory index [N] in 0..n_traj−1, n_traj, task group of each trajectory [n_traj])`` of step rows.

    Every row of a trajectory must carry the same ``group`` (``batch.group``); with ``step`` the rows of every
    trajectory must also carry the turn indices ``0..T_i−1`` once each, in any row order (``check_steps``).
    ValueError naming ``who`` otherwise."""
    try:
        if step is None:
            _, tinv = torch.unique(traj, return_inverse=True)
            n_traj = int(tinv.max()) + 1 if tinv.numel() else 0
        else:
            tinv, n_traj = check_steps(traj, step)
    except ValueError as err:
        raise ValueError(f"{who}: {err}") from None
    lo = group.new_full((n_traj,), torch.iinfo(group.dtype).max).scatter_reduce(0, tinv, group, "amin")
    hi = group.new_full((n_traj,), torch.iinfo(group.dtype).min).scatter_reduce(0, tinv, group, "amax")
    if not bool((lo == hi).all()):
        raise ValueError(f"{who}: a trajectory id spans several groups (batch.group); traj ids must be unique in "
                         "the batch and every row of a trajectory must carry its task's group")
    return tinv, n_traj, lo


def trajectory_length(tinv: Tensor, n_traj: int) -> Tensor:
    """Number of rows ``T_i`` of each row's trajectory, ``[N]`` (``tinv`` from ``trajectories``)."""
    return torch.bincount(tinv, minlength=n_traj)[tinv] if n_traj else tinv.clone()


def constant_per(x: Tensor, seg: Tensor, n: int) -> Tensor:
    """Per segment ``[n]``: True where every member of the segment carries the same ``x`` (empty: True)."""
    big = torch.finfo(x.dtype).max if x.is_floating_point() else torch.iinfo(x.dtype).max
    lo = x.new_full((n,), big).scatter_reduce(0, seg, x, "amin")
    hi = x.new_full((n,), -big if x.is_floating_point() else torch.iinfo(x.dtype).min).scatter_reduce(
        0, seg, x, "amax")
    return (lo == hi) | (segment_sum(torch.ones_like(seg), seg, n) == 0)
