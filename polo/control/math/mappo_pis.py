"""The world model of MAPPO-PIS in one dimension: intents, the safety module's rooms and choice, the order in which
agents are shielded, and the merge scenario's reward terms.

From "MAPPO-PIS: A Multi-Agent Proximal Policy Optimization Method with Prior Intent Sharing for CAVs'
Cooperative Decision-Making" (arXiv:2408.06656), reduced to one dimension. Vehicles move along a lane
coordinate ``x`` (m) with speed ``v`` (m/s):

* an *intent* is the path a vehicle follows over the next H steps if it keeps one acceleration: per step
  ``x ← x + v·dt`` then ``v ← clamp(v + a·dt, v_min, v_max)``;
* the *safety room* of a candidate action is the smallest predicted gap over those H steps to the vehicles that
  matter in the lane the action leads to (every one of them for a lane change, only those ahead otherwise) and
  to the end of a lane that ends; the *safety module* keeps a planned action whose room is at least the collision
  threshold and otherwise executes the available action with the largest room;
* agents are shielded one after the other, most urgent first (the smallest *priority* score).

The released code's critic target, the discounted Monte-Carlo return of the scaled reward with a bootstrap at the
rollout's end, is the registered ``gae`` with ``λ = 1`` and a zero baseline (with ``Q(o, a)`` as the baseline it
gives the released advantage ``G − Q``); no second implementation lives here.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor

SLOWER, IDLE, FASTER, MERGE = 0, 1, 2, 3
"""The meta-actions of a controlled vehicle (MERGE: change from the ramp to the main lane)."""


def intent_paths(x: Tensor, v: Tensor, accel: Tensor, dt: float, steps: int, v_min: float = 0.0,
                 v_max: float = math.inf) -> tuple[Tensor, Tensor]:
    """Positions and speeds ``[..., steps]`` after each of ``steps`` steps at the constant acceleration ``accel``
    (``x``, ``v``, ``accel`` broadcast) of ``x_{k+1} = x_k + v_k·dt``, ``v_{k+1} = clamp(v_k + a·dt, v_min, v_max)``.

    For ``v_min ≤ v ≤ v_max`` the clamped speeds form the ramp ``v_k = clamp(v + k·a·dt, v_min, v_max)`` (a ramp
    that hits a bound stays there), so ``x_k = x + dt·Σ_{j<k} v_j`` is one cumulative sum."""
    x, v, accel = torch.broadcast_tensors(torch.as_tensor(x), torch.as_tensor(v), torch.as_tensor(accel))
    k = torch.arange(1, steps + 1, dtype=v.dtype)
    speeds = (v[..., None] + accel[..., None] * dt * k).clamp(v_min, v_max)
    before = torch.cat([v[..., None], speeds[..., :-1]], -1)
    return x[..., None] + dt * before.cumsum(-1), speeds


def safety_rooms(ego_paths: Tensor, ego_x: Tensor | float, lane_change: Tensor, target_lane: Tensor, barrier: Tensor,
                 other_paths: Tensor, other_x: Tensor, other_lane: Tensor) -> Tensor:
    """The room ``[..., A]`` of each of A candidate actions: the minimum over the H predicted steps of the gaps that
    matter once the ego (now at ``ego_x`` ``[...]``) follows ``ego_paths[..., a, :]`` ``[..., A, H]`` into lane
    ``target_lane`` ``[..., A]``:

    * to each other vehicle j in that lane (``other_paths`` ``[..., V, H]``, current positions ``other_x``
      ``[..., V]``, lanes ``other_lane`` ``[..., V]``): ``|y_j − x|`` for a lane change (``lane_change``
      ``[..., A]``: the gap either side), else the front gap ``y_j − x`` to the vehicles ahead now;
    * to the lane's end ``barrier`` ``[..., A]`` (where an obstacle stands; ``inf`` for none): ``barrier − x``.

    ``inf`` when nothing matters. A predicted collision is a room below the collision distance. Leading dims
    ``...`` batch several egos (each with its own others)."""
    to_end = (barrier[..., None] - ego_paths).amin(-1)                                    # [..., A]
    if other_paths.shape[-2] == 0:
        return to_end
    ahead = other_x > torch.as_tensor(ego_x, dtype=other_x.dtype)[..., None]              # [..., V]
    relevant = (other_lane[..., None, :] == target_lane[..., :, None]) & (lane_change[..., :, None] | ahead[..., None, :])
    diff = other_paths[..., None, :, :] - ego_paths[..., :, None, :]                      # [..., A, V, H]
    gap = torch.where(lane_change[..., :, None, None], diff.abs(), diff)
    gap = torch.where(relevant[..., None], gap, torch.full_like(gap, math.inf))
    return torch.minimum(gap.amin(dim=(-2, -1)), to_end)


def shield_action(planned: int, rooms: Tensor, available: Tensor, threshold: float) -> int:
    """The safety module's choice: the ``planned`` action when its room is at least ``threshold`` (no predicted
    collision), else the ``available`` (``[A]`` bool) action with the largest room (the first on a tie)."""
    if bool(available[planned]) and float(rooms[planned]) >= threshold:
        return planned
    masked = torch.where(available, rooms, torch.full_like(rooms, -math.inf))
    return int(masked.argmax())


def _log_headway_ratio(headway: Tensor, speed: Tensor, headway_time: float) -> Tensor:
    """``log(h / (T_h·v))``, 0 where ``v = 0`` (no headway to keep when standing)."""
    moving = speed > 0
    ratio = headway / (headway_time * torch.where(moving, speed, torch.ones_like(speed)))
    return torch.where(moving, torch.log(ratio), torch.zeros_like(speed))


def merge_priority(on_ramp: Tensor, to_end: Tensor, headway: Tensor, speed: Tensor, merge_length: float,
                   headway_time: float = 1.2, tie_break: Tensor | None = None) -> Tensor:
    """Urgency score ``[n]`` of each agent (smaller = shielded earlier): ``½·log(h/(T_h·v))`` (0 when standing),
    minus ``½ + (L − d_end)/L`` for an agent still on the ramp at distance ``d_end`` = ``to_end`` from the end of a
    merging section of length L, plus an optional small random ``tie_break``."""
    score = 0.5 * _log_headway_ratio(headway, speed, headway_time)
    score = score - on_ramp.to(score) * (0.5 + (merge_length - to_end) / merge_length)
    return score if tie_break is None else score + tie_break


def speed_reward(speed: Tensor, low: float = 10.0, high: float = 30.0) -> Tensor:
    """``clip((v − low)/(high − low), 0, 1)``: the fraction of the rewarded speed range reached."""
    return ((speed - low) / (high - low)).clamp(0.0, 1.0)


def headway_cost(headway: Tensor, speed: Tensor, headway_time: float = 1.2) -> Tensor:
    """``min(0, log(h/(T_h·v)))``: negative when the gap ahead is shorter than ``T_h`` seconds of travel."""
    return _log_headway_ratio(headway, speed, headway_time).clamp(max=0.0)


def merge_cost(x: Tensor, merge_end: float, merge_length: float) -> Tensor:
    """``−exp(−(x − x_end)²/(10·L))``: a cost that grows to −1 as a vehicle still on the ramp nears its end."""
    return -torch.exp(-((x - merge_end) ** 2) / (10.0 * merge_length))


def agent_rewards(crashed: Tensor, speed: Tensor, headway: Tensor, on_ramp: Tensor, x: Tensor, merge_end: float,
                  merge_length: float, collision: float = 200.0, high_speed: float = 1.0, merging: float = 4.0,
                  headway_weight: float = 4.0, headway_time: float = 1.2, speed_range: tuple[float, float] = (10.0, 30.0)
                  ) -> Tensor:
    """Per-agent reward ``[n]``: ``−R_col·crashed + R_v·speed_reward + R_m·merge_cost·on_ramp +
    R_h·headway_cost``."""
    return (-collision * crashed.to(speed) + high_speed * speed_reward(speed, *speed_range)
            + merging * merge_cost(x, merge_end, merge_length) * on_ramp.to(speed)
            + headway_weight * headway_cost(headway, speed, headway_time))
