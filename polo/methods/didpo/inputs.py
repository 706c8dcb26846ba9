"""The ``diff_anchor`` input provider (DiDPO): the anchors of each task group's sub-diffs as per-row tensors.

It reads every step row's ``TurnRecord`` (``Rollouts.turns``): the environment's sub-diffs of the turn
(``info`` key ``subdiffs``: one dict per changed line range with its edit ``type``, ``old`` and ``new`` lines,
old-source range and the character ``span`` of the action's commands that wrote it; ``origin`` ``root``), mines
the anchors of each task group (``polo.methods.didpo.anchors``) and writes, with K the most occurrences a
row has:

* ``diff_anchor`` ``[N, K]`` long: anchor id of each occurrence of the row (1.. per task group; 0 = empty),
* ``diff_lines`` ``[N, K]`` float: its size in lines,
* ``diff_span`` ``[N, K, 2]`` long: the response columns ``[start, end)`` of the tokens that wrote it.

Character spans become token columns through the policy's tokenizer: the row's response tokens are decoded
one by one (or, when the pieces do not add up to the decoded text, as growing prefixes), the action is found
in the decoded text (the engine strips it), and an occurrence covers every token whose characters meet its
span. An occurrence that is a part of a unit's lines covers the characters of that text inside the unit's span
when found there, the whole span otherwise. The mining settings are the ``didpo`` component's fields.
"""
from __future__ import annotations

import time

import torch
from torch import Tensor

from polo.methods.didpo.anchors import AnchorSettings, Occurrence, Unit, mine_anchors
from polo.engines.episodes import TurnRecord
from polo.inputs.base import ProviderContext, component_setting, register_provider
from polo.inputs.char_spans import char_ends, token_columns

NAMES = ("diff_anchor", "diff_lines", "diff_span")
SETTINGS = {"sim_thresh": 0.8, "min_block_lines": 1, "max_pairs_per_uid": 64, "max_anchors_per_uid": 64,
            "overhead_mode": "lightweight", "s0": 8.0, "g0": 8.0, "gs_form": "saturating"}


def anchor_settings(components) -> AnchorSettings:
    """The mining settings of the run's components (their defaults when none has the field)."""
    got = {name: component_setting(components, name, default) for name, default in SETTINGS.items()}
    return AnchorSettings.resolve(got["overhead_mode"], got["max_pairs_per_uid"], sim_thresh=got["sim_thresh"],
                                  min_block_lines=got["min_block_lines"], max_anchors=got["max_anchors_per_uid"],
                                  s0=got["s0"], g0=got["g0"], form=got["gs_form"])


def row_units(records: list[TurnRecord]) -> list[Unit]:
    """The root sub-diffs of every row, in row order."""
    return [Unit.from_subdiff(i, d) for i, r in enumerate(records) for d in r.info.get("subdiffs") or ()
            if d.get("origin", "root") == "root"]


def occurrence_chars(unit: Unit, occ: Occurrence, action: str) -> tuple[int, int]:
    """The action characters of ``occ``: its lines' text inside the unit's span when found there, else the span."""
    c0, c1 = unit.span
    if occ.lo == 0 and occ.hi == len(unit.lines):
        return c0, c1
    text = "\n".join(unit.lines[occ.lo:occ.hi])
    at = action.find(text, c0, c1)
    return (at, at + len(text)) if at >= 0 else (c0, c1)


@register_provider(*NAMES)
def diff_anchor(ctx: ProviderContext, rollouts) -> dict[str, Tensor]:
    """``diff_anchor``, ``diff_lines``, ``diff_span``: DiDPO's mined sub-diff anchors per step row."""
    if rollouts.turns is None:
        raise ValueError("input 'diff_anchor' reads the sub-diffs of multi-turn rows: use engine: {name: multi_turn} "
                         "with an environment whose steps report subdiffs (CodeFix-v0)")
    started = time.perf_counter()
    records, batch = rollouts.turns, rollouts.batch
    settings = anchor_settings(ctx.components.values())
    units = row_units(records)
    group = batch.group.tolist()
    by_group: dict[int, list[int]] = {}
    for i, u in enumerate(units):
        by_group.setdefault(group[u.row], []).append(i)
    slots: list[list[tuple[int, int, Occurrence]]] = [[] for _ in records]  # (anchor id, unit index, occurrence)
    for members in by_group.values():
        local = [units[i] for i in members]
        for anchor_id, anchor in enumerate(mine_anchors(local, settings), 1):
            for o in anchor:
                slots[local[o.unit].row].append((anchor_id, members[o.unit], o))
    ids, mask = batch.response_ids.tolist(), batch.response_mask
    last = torch.where(mask.bool(), torch.arange(mask.shape[1]), -1).amax(1).tolist() if mask.numel() else []
    K = max(map(len, slots), default=0)
    anchor = torch.zeros(len(records), K, dtype=torch.long)
    lines = torch.zeros(len(records), K)
    span = torch.zeros(len(records), K, 2, dtype=torch.long)
    unmapped = 0
    for row, row_slots in enumerate(slots):
        if not row_slots:
            continue
        text, ends = char_ends(ctx.policy.tokenizer, ids[row][: last[row] + 1])
        lead = text.find(records[row].action)
        if lead < 0:
            unmapped += 1
            continue
        for k, (anchor_id, u, o) in enumerate(row_slots):
            c0, c1 = occurrence_chars(units[u], o, records[row].action)
            anchor[row, k], lines[row, k] = anchor_id, float(o.size)
            span[row, k] = torch.tensor(token_columns(ends, lead + c0, lead + c1))
    ctx.metrics.update({"didpo/root_subdiffs": float(len(units)), "didpo/unmapped_rows": float(unmapped),
                        "didpo/mining_ms": 1000 * (time.perf_counter() - started)})
    return {"diff_anchor": anchor, "diff_lines": lines, "diff_span": span}
