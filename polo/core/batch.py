"""The rollout batch: the one currency between pipeline stages (prompts, responses, groups, rewards, log-probs,
advantages and the per-component extras)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace

import torch
from torch import Tensor


@dataclass
class RolloutBatch:
    """B samples; prompts left-padded to Tp, responses right-padded to T.

    ``rewards`` is ``[B, K]`` with ``reward_names``/``reward_weights`` naming and weighting the K
    components and ``reward_max`` ``[K]`` giving the largest value each can take (``inf``: unbounded or
    undeclared). ``old_logp``/``ref_logp``/``values``/``advantages``/``returns`` are ``[B, T]`` and are
    filled by the trainer only when a chosen component needs them. ``extras`` holds per-component
    tensors whose first dimension is B (entropies, hidden states, teacher log-probs, ...). ``turn`` ``[B, T]`` is
    each response token's turn index (−1 off the response) and ``parent`` ``[B]`` the trajectory id of the
    row's parent in a rollout tree (−1 for a root; trajectory ids are ``extras["traj"]`` in multi-turn
    batches).
    """

    prompt_ids: Tensor
    prompt_mask: Tensor
    response_ids: Tensor
    response_mask: Tensor
    group: Tensor
    rewards: Tensor
    reward_names: tuple[str, ...] = ()
    reward_weights: Tensor | None = None
    reward_max: Tensor | None = None
    truncated: Tensor | None = None
    old_logp: Tensor | None = None
    ref_logp: Tensor | None = None
    values: Tensor | None = None
    advantages: Tensor | None = None
    returns: Tensor | None = None
    turn: Tensor | None = None
    parent: Tensor | None = None
    extras: dict[str, Tensor] = field(default_factory=dict)

    def __post_init__(self):
        B, T = self.response_ids.shape
        if self.rewards.dim() == 1:
            self.rewards = self.rewards[:, None]
        if self.reward_weights is None:
            self.reward_weights = torch.ones(self.rewards.shape[1], dtype=self.rewards.dtype)
        if self.reward_max is None:
            self.reward_max = torch.full((self.rewards.shape[1],), float("inf"), dtype=self.reward_weights.dtype)
        if not self.reward_names:
            self.reward_names = tuple(f"r{k}" for k in range(self.rewards.shape[1]))
        if self.truncated is None:
            self.truncated = torch.zeros(B, dtype=torch.bool)
        if self.turn is None:
            self.turn = torch.where(self.response_mask.bool(), 0, -1)
        if self.parent is None:
            self.parent = torch.full((B,), -1, dtype=torch.long)
        for name in ("prompt_mask", "response_mask", "group", "rewards", "truncated", "parent"):
            value = getattr(self, name)
            if value.shape[0] != B:
                raise ValueError(f"RolloutBatch.{name} has {value.shape[0]} rows, expected B={B}")
        if self.response_mask.shape != (B, T):
            raise ValueError(f"response_mask shape {tuple(self.response_mask.shape)} != {(B, T)}")

    @property
    def batch_size(self) -> int:
        return self.response_ids.shape[0]

    @property
    def lengths(self) -> Tensor:
        """Trained response tokens per sample, ``[B]``."""
        return self.response_mask.sum(-1)

    @property
    def mask(self) -> Tensor:
        """``response_mask`` as float, the form the math uses: converted once per ``response_mask`` tensor (a
        new tensor assigned to the field is converted anew), so treat it as read-only."""
        dtype = self.rewards.dtype if self.rewards.is_floating_point() else torch.float32
        source, converted = self.__dict__.get("_float_mask", (None, None))
        if source is not self.response_mask or converted.dtype != dtype:
            converted = self.response_mask.to(dtype)
            self.__dict__["_float_mask"] = (self.response_mask, converted)
        return converted

    def input(self, name: str) -> Tensor | None:
        """An input by the name components declare: a field of the batch, or ``extras[name]``."""
        return getattr(self, name) if name in BATCH_FIELDS else self.extras.get(name)

    def require(self, name: str, where: str) -> Tensor:
        """``input(name)``; a ValueError starting with ``where`` (who needs it and what it is) when the batch has
        none."""
        value = self.input(name)
        if value is None:
            raise ValueError(f"{where}; the batch has none (extras: {sorted(self.extras) or 'none'})")
        return value

    def set_input(self, name: str, value: Tensor) -> None:
        """Write an input under its declared name: into the field of that name, or into ``extras``."""
        if name in BATCH_FIELDS:
            setattr(self, name, value)
        else:
            self.extras[name] = value

    def scalar_reward(self) -> Tensor:
        """Weighted sum of the reward components, ``[B]``: Σ_k w_k R_k."""
        return self.rewards @ self.reward_weights.to(self.rewards)

    def reward_column(self, name: str) -> Tensor:
        """Reward component ``name`` unweighted, ``[B]``, NaN on the rows it did not score (False in
        ``extras["reward_present"]``); a ValueError naming the batch's components when there is none."""
        if name not in self.reward_names:
            raise ValueError(f"no reward component {name!r} in this batch; its components: "
                             f"{', '.join(self.reward_names)} (add it to the recipe's rewards)")
        k = self.reward_names.index(name)
        column = self.rewards[:, k]
        present = self.extras.get("reward_present")
        return column if present is None else torch.where(present[:, k].bool(), column, torch.nan)

    def add_reward(self, name: str, values: Tensor, weight: float, max_value: float = math.inf,
                   present: Tensor | None = None) -> None:
        """Append reward component ``name``: ``values`` ``[B]`` becomes the last column of ``rewards`` (in its
        dtype and device), weighted by ``weight`` in ``scalar_reward`` and bounded by ``max_value``
        (``reward_max``; inf: unbounded). When the batch records which rows each component scored
        (``extras["reward_present"]``), ``present`` ``[B]`` bool (default: every row) is its new column.

        Values are stored as given, a NaN included: a term that cannot score a row writes 0 there and says so in
        ``present``, as the engine's reward scores do. A ValueError names the component for ``values`` or
        ``present`` of another length than B, or a name the batch already has.
        """
        B = self.batch_size
        if name in self.reward_names:
            raise ValueError(f"RolloutBatch.add_reward: the batch already has a reward component {name!r} "
                             f"(its components: {', '.join(self.reward_names)})")
        for what, tensor in (("values", values), ("present", present)):
            if tensor is not None and tuple(tensor.shape) != (B,):
                raise ValueError(f"RolloutBatch.add_reward({name!r}): {what} has shape {list(tensor.shape)}, "
                                 f"expected [B] = [{B}]")
        self.rewards = torch.cat([self.rewards, values.to(self.rewards)[:, None]], 1)
        self.reward_names = (*self.reward_names, name)
        self.reward_weights = torch.cat([self.reward_weights, torch.tensor([weight])])
        self.reward_max = torch.cat([self.reward_max, torch.tensor([max_value])])
        if "reward_present" in self.extras:
            scored = self.extras["reward_present"]
            rows = torch.ones(B, dtype=torch.bool) if present is None else present
            self.extras["reward_present"] = torch.cat([scored, rows.to(scored)[:, None]], 1)

    def select(self, index: Tensor) -> "RolloutBatch":
        """Rows ``index`` of every per-sample tensor (``index`` is a bool mask or long indices)."""
        B = self.batch_size
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, Tensor) and value.dim() > 0 and value.shape[0] == B and f.name not in PER_COMPONENT:
                out[f.name] = value[index]
        out["extras"] = {k: v[index] for k, v in self.extras.items()}
        return replace(self, **out)

    def to(self, device: torch.device | str) -> "RolloutBatch":
        out = {f.name: getattr(self, f.name).to(device) for f in fields(self) if isinstance(getattr(self, f.name), Tensor)}
        out["extras"] = {k: v.to(device) for k, v in self.extras.items()}
        return replace(self, **out)


BATCH_FIELDS = frozenset(f.name for f in fields(RolloutBatch)) - {"extras"}


def _pad_to(x: Tensor, width: int, left: bool, fill: int = 0) -> Tensor:
    extra = width - x.shape[1]
    if extra == 0:
        return x
    pad = x.new_full((x.shape[0], extra, *x.shape[2:]), fill)
    return torch.cat([pad, x] if left else [x, pad], 1)


PROMPT_FIELDS = ("prompt_ids", "prompt_mask")
PER_COMPONENT = ("reward_names", "reward_weights", "reward_max")
"""Fields indexed by reward component, not by sample."""


def concat_batches(batches: list[RolloutBatch]) -> RolloutBatch:
    """Stack batches row-wise: prompts re-left-padded, responses re-right-padded (with 0 / mask 0), group
    ids offset so that groups of different batches stay distinct, and trajectory ids too: ``extras["traj"]``
    and the ``parent`` trajectory ids are shifted past the previous batches' (a batch without ``traj``
    counts one trajectory per row)."""
    if len(batches) == 1:
        return batches[0]
    first = batches[0]
    out = {}
    traj_offsets, total = [], 0
    for b in batches:
        traj_offsets.append(total)
        traj = b.extras.get("traj")
        total += (int(traj.max()) + 1 if traj.numel() else 0) if traj is not None else b.batch_size
    for f in fields(first):
        values = [getattr(b, f.name) for b in batches]
        if f.name == "extras":
            keys = set(values[0]).intersection(*values[1:])
            out["extras"] = {k: _cat([v[k] for v in values], left=False) for k in keys}
            if "traj" in keys:
                out["extras"]["traj"] = torch.cat([v["traj"] + o for v, o in zip(values, traj_offsets)])
        elif f.name in PER_COMPONENT:
            out[f.name] = values[0]
        elif f.name == "group":
            offsets, total = [], 0
            for v in values:
                offsets.append(total)
                total += int(v.max()) + 1 if v.numel() else 0
            out["group"] = torch.cat([v + o for v, o in zip(values, offsets)])
        elif f.name == "parent":
            out["parent"] = torch.cat([torch.where(v >= 0, v + o, v) for v, o in zip(values, traj_offsets)])
        elif values[0] is None or any(v is None for v in values):
            out[f.name] = None
        else:
            out[f.name] = _cat(values, left=f.name in PROMPT_FIELDS, fill=-1 if f.name == "turn" else 0)
    return RolloutBatch(**out)


def _cat(values: list[Tensor], left: bool, fill: int = 0) -> Tensor:
    if values[0].dim() < 2:
        return torch.cat(values)
    width = max(v.shape[1] for v in values)
    return torch.cat([_pad_to(v, width, left, fill) for v in values])
