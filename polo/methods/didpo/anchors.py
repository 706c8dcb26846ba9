"""DiDPO's anchor mining: which sub-diffs of one task's rollouts recur closely enough to share a baseline.

Host-side string work on the step rows of one task group (``uid``). A *unit* is one root sub-diff of one row
(a contiguous changed line range; its lines are the new lines, the old lines for a deletion). An
*occurrence* is a line range inside a unit. ``mine_anchors`` returns the chosen anchors, each a list of
occurrences in distinct rows (at least two):

1. Candidates, inside one *scope* = (edit type, the old lines the unit replaced): (i) exact buckets of whole
   unit texts; (ii) ``difflib`` line opcodes between the bucket representatives, pair by pair (largest buckets
   first, at most ``max_pairs``): ``equal`` blocks of ≥ ``min_block_lines`` lines, and ``replace`` blocks whose
   two sides have character similarity ``SequenceMatcher.ratio() ≥ sim_thresh``, keyed by the longer side;
   (iii) one representative merge: buckets by decreasing support, each joins the first earlier survivor whose
   text is ≥ ``sim_thresh`` similar (non-transitive), else survives; (iv) one occurrence per row (the largest);
   (v) support ≥ 2.
2. Greedy facility location: repeatedly take the candidate with the largest gain ``Σ_occ max(0, GS −
   covered(occ))`` (positive, at most ``max_anchors``), ``covered`` the best GS already covering that
   occurrence; then per unit keep non-overlapping occurrences, higher GS first (then longer); drop anchors
   left with support ≤ 1.
3. Fallback (``full``: always; ``lightweight``: when step 2 chose nothing): units grouped by their position
   (edit type and old line range, our stand-in for the authors' AST signature: in CodeFix one function body per
   line), refined greedily first-fit by text similarity ≥ ``sim_thresh``; one occurrence (the whole unit) per
   row, support ≥ 2.

The scope is our choice: a sub-diff is identified by what it replaced as well as what it wrote, so edits of
different functions never share an anchor even when their new lines look alike (one-line bodies such as
``return a + b`` and ``return a - b`` are 94 % similar), while near-identical rewrites of the same code do.
"""
from __future__ import annotations

import difflib
import itertools
from dataclasses import dataclass
from typing import Literal

import torch

from polo.methods.didpo.advantage import groupability_score

OverheadMode = Literal["exact_only", "lightweight", "full"]
LIGHTWEIGHT_PAIRS = 8


@dataclass(frozen=True)
class Unit:
    """One root sub-diff of row ``row``: its ``kind`` (replace/insert/delete), the ``old`` lines it replaced,
    its ``lines``, the character ``span`` of the action that wrote it and its old-source line range ``where``."""

    row: int
    kind: str
    old: str
    lines: tuple[str, ...]
    span: tuple[int, int]
    where: tuple[int, int]

    @property
    def scope(self) -> tuple[str, str]:
        return self.kind, self.old

    @classmethod
    def from_subdiff(cls, row: int, subdiff: dict) -> "Unit":
        """The unit of an environment's sub-diff dict (keys ``type``, ``old``, ``new``, ``span``,
        ``old_start``, ``old_end``)."""
        kind = subdiff["type"]
        if kind not in ("replace", "insert", "delete"):
            raise ValueError(f"sub-diff type {kind!r}; expected replace, insert or delete")
        text = subdiff["old"] if kind == "delete" else subdiff["new"]
        c0, c1 = subdiff["span"]
        return cls(row, kind, subdiff["old"] if kind != "insert" else "", tuple(text.split("\n")), (int(c0), int(c1)),
                   (int(subdiff["old_start"]), int(subdiff["old_end"])))


@dataclass(frozen=True)
class Occurrence:
    """Lines ``[lo, hi)`` of unit ``unit`` (an index into the task group's unit list)."""

    unit: int
    lo: int
    hi: int

    @property
    def size(self) -> int:
        return self.hi - self.lo


@dataclass(frozen=True)
class AnchorSettings:
    """The mining settings (DiDPO's fields of the same names); ``max_pairs`` is already resolved for the mode."""

    sim_thresh: float = 0.8
    min_block_lines: int = 1
    max_pairs: int = LIGHTWEIGHT_PAIRS
    max_anchors: int = 64
    mode: OverheadMode = "lightweight"
    s0: float = 8.0
    g0: float = 8.0
    form: str = "saturating"

    @classmethod
    def resolve(cls, mode: str, max_pairs_per_uid: int, **rest) -> "AnchorSettings":
        """``exact_only``: no pairwise matching, no fallback; ``lightweight``: at most 8 pairs, the fallback only
        when nothing aligned; ``full``: ``max_pairs_per_uid`` pairs and the fallback always."""
        pairs = {"exact_only": 0, "lightweight": LIGHTWEIGHT_PAIRS, "full": max_pairs_per_uid}
        if mode not in pairs:
            raise ValueError(f"overhead_mode {mode!r}; expected exact_only, lightweight or full")
        return cls(max_pairs=pairs[mode], mode=mode, **rest)


def similarity(a: str, b: str) -> float:
    """``difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()``: 2·matches / (len a + len b)."""
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


def _text(unit: Unit, lo: int = 0, hi: int | None = None) -> str:
    return "\n".join(unit.lines[lo:hi])


def _one_per_row(occs: list[Occurrence], units: list[Unit]) -> list[Occurrence]:
    """The largest occurrence of each row (the first among equals), in first-seen row order."""
    best: dict[int, Occurrence] = {}
    for o in occs:
        row = units[o.unit].row
        if row not in best or o.size > best[row].size:
            best[row] = o
    return list(best.values())


def _score(occs: list[Occurrence], s: AnchorSettings) -> float:
    size = sum(o.size for o in occs) / len(occs)
    return float(groupability_score(torch.tensor([size]), torch.tensor([len(occs)]), s.form, s.s0, s.g0))


def candidate_buckets(units: list[Unit], s: AnchorSettings) -> list[tuple[tuple, list[Occurrence], str]]:
    """Steps (i)–(iii): ``(scope, occurrences, representative text)`` per bucket, after the merge."""
    buckets: dict[tuple, list[Occurrence]] = {}
    texts: dict[tuple, str] = {}

    def add(key: tuple, text: str, occ: Occurrence) -> None:
        if occ not in buckets.setdefault(key, []):
            buckets[key].append(occ)
        texts.setdefault(key, text)

    for i, u in enumerate(units):  # (i) exact buckets
        add(("full", u.scope, _text(u)), _text(u), Occurrence(i, 0, len(u.lines)))
    exact = [(k, list(v)) for k, v in buckets.items()]
    exact.sort(key=lambda kv: -len({units[o.unit].row for o in kv[1]}))
    pairs = itertools.islice(((a, b) for a, b in itertools.combinations(exact, 2) if a[0][1] == b[0][1]), s.max_pairs)
    for (ka, occ_a), (_, occ_b) in pairs:  # (ii) pairwise opcodes between the representatives of distinct texts
        ua, ub = units[occ_a[0].unit], units[occ_b[0].unit]
        for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, ua.lines, ub.lines, autojunk=False).get_opcodes():
            side_a, side_b = _text(ua, i1, i2), _text(ub, j1, j2)
            if max(i2 - i1, j2 - j1) < s.min_block_lines or tag not in ("equal", "replace") or (
                    tag == "replace" and similarity(side_a, side_b) < s.sim_thresh):
                continue
            canon = max(side_a, side_b, key=len)  # equal blocks: the same text
            for occs, lo, hi in ((occ_a, i1, i2), (occ_b, j1, j2)):
                for o in occs:
                    add(("block", ka[1], canon), canon, Occurrence(o.unit, lo, hi))
    items = [(k[1], _one_per_row(v, units), texts[k]) for k, v in buckets.items()]
    items.sort(key=lambda item: -len(item[1]))
    survivors: list[tuple[tuple, list[Occurrence], str]] = []
    for scope, occs, rep in items:  # (iii) one-shot representative merge
        home = next((sv for sv in survivors if sv[0] == scope and similarity(rep, sv[2]) >= s.sim_thresh), None)
        if home is None:
            survivors.append((scope, list(occs), rep))
        else:
            home[1].extend(occs)
    return [(scope, _one_per_row(occs, units), rep) for scope, occs, rep in survivors]


def select_anchors(cands: list[list[Occurrence]], s: AnchorSettings) -> list[list[Occurrence]]:
    """Greedy facility location over the candidates by marginal GS gain (step 2, before the cut)."""
    scores = [_score(c, s) for c in cands]
    covered: dict[Occurrence, float] = {}
    chosen: list[int] = []
    while len(chosen) < s.max_anchors:
        gains = [sum(max(0.0, g - covered.get(o, 0.0)) for o in c) if i not in chosen else 0.0
                 for i, (c, g) in enumerate(zip(cands, scores))]
        best = max(range(len(gains)), key=lambda i: (gains[i], -i), default=None)
        if best is None or gains[best] <= 1e-12:
            break
        chosen.append(best)
        for o in cands[best]:
            covered[o] = max(covered.get(o, 0.0), scores[best])
    return [cands[i] for i in chosen]


def nonoverlap_cut(anchors: list[list[Occurrence]], units: list[Unit], s: AnchorSettings) -> list[list[Occurrence]]:
    """Per unit, non-overlapping occurrences (higher GS, then longer, then earlier anchor first); anchors left
    with support ≤ 1 dropped."""
    scores = [_score(a, s) for a in anchors]
    per_unit: dict[int, list[tuple[float, int, int, Occurrence]]] = {}
    for k, anchor in enumerate(anchors):
        for o in anchor:
            per_unit.setdefault(o.unit, []).append((-scores[k], -o.size, k, o))
    kept: list[list[Occurrence]] = [[] for _ in anchors]
    for items in per_unit.values():
        taken: list[Occurrence] = []
        for _, _, k, o in sorted(items, key=lambda t: t[:3]):
            if all(o.hi <= t.lo or o.lo >= t.hi for t in taken):
                taken.append(o)
                kept[k].append(o)
    out = [_one_per_row(occs, units) for occs in kept]
    return [a for a in out if len(a) >= 2 and _score(a, s) > 0]


def fallback_groups(units: list[Unit], s: AnchorSettings) -> list[list[Occurrence]]:
    """Step 3: whole units grouped by (edit type, old line range), refined first-fit by similarity."""
    by_place: dict[tuple, list[tuple[str, list[Occurrence]]]] = {}
    for i, u in enumerate(units):
        clusters = by_place.setdefault((u.kind, u.where), [])
        text = _text(u)
        home = next((c for c in clusters if similarity(text, c[0]) >= s.sim_thresh), None)
        if home is None:
            clusters.append((text, [Occurrence(i, 0, len(u.lines))]))
        else:
            home[1].append(Occurrence(i, 0, len(u.lines)))
    groups = [_one_per_row(occs, units) for clusters in by_place.values() for _, occs in clusters]
    return [g for g in groups if len(g) >= 2 and _score(g, s) > 0]


def mine_anchors(units: list[Unit], settings: AnchorSettings) -> list[list[Occurrence]]:
    """The anchors of one task group's ``units``: each a list of occurrences in distinct rows (≥ 2), alignment
    anchors first, then fallback groups. Deterministic given the units' order."""
    if len(units) < 2:
        return []
    candidates = [occs for _, occs, _ in candidate_buckets(units, settings) if len(occs) >= 2]
    anchors = nonoverlap_cut(select_anchors(candidates, settings), units, settings)
    if settings.mode == "full" or (settings.mode == "lightweight" and not anchors):
        anchors += fallback_groups(units, settings)
    return anchors
