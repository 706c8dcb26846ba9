"""DiDPO's anchor mining and its ``diff_anchor`` provider on synthetic turn records: exact buckets, near-equal
rewrites merged at sim_thresh, equal blocks of multi-line sub-diffs, the non-overlap cut, the fallback, the
overhead modes, token columns under a character and a multi-character tokenizer, determinism, and the provider's
tensors read by the estimator."""
from types import SimpleNamespace

import pytest
import torch

from polo.methods.didpo.advantage import DiDPO
from polo.core.batch import RolloutBatch
from polo.policy.tokenizer import build_char_tokenizer
from polo.methods.didpo.anchors import (
    AnchorSettings, Occurrence, Unit, mine_anchors, nonoverlap_cut, select_anchors,
)
from polo.inputs.char_spans import char_ends, token_columns
from polo.methods.didpo.inputs import diff_anchor, occurrence_chars
from polo.engines.base import Rollouts
from polo.engines.episodes import TurnRecord
from polo.inputs.base import PROVIDERS, ProviderContext

BUGGY = "    return a - b"


def subdiff(new, old=BUGGY, span=(0, 3), kind="replace", where=1):
    return {"start": where, "end": where + 1, "old_start": where, "old_end": where + 1, "type": kind, "old": old,
            "new": new, "span": list(span), "origin": "root"}


def units_of(rows):
    """Units from ``rows``: per row a list of sub-diff dicts."""
    return [Unit.from_subdiff(i, d) for i, row in enumerate(rows) for d in row]


def anchor_rows(anchors, units):
    return [sorted(units[o.unit].row for o in a) for a in anchors]


def settings(mode="lightweight", **kw):
    return AnchorSettings.resolve(mode, 64, **kw)


def test_exact_buckets_scope_and_singletons():
    # rows 0-2 fix line 1 the same way; row 3 writes the same text over other code (another scope): alone
    rows = [[subdiff("    return a + b")]] * 3 + [[subdiff("    return a + b", old="    return a * 3", where=4)]]
    units = units_of(rows)
    anchors = mine_anchors(units, settings("exact_only"))
    assert anchor_rows(anchors, units) == [[0, 1, 2]]
    assert all(o.size == 1 for o in anchors[0])


def test_near_equal_rewrites_merge_at_sim_thresh():
    # "a + b" and "a + 1" over the same buggy line: 15 of 16 characters agree (ratio 0.9375)
    rows = [[subdiff("    return a + b")], [subdiff("    return a + b")], [subdiff("    return a + 1")],
            [subdiff("    return a // 3")]]
    units = units_of(rows)
    assert anchor_rows(mine_anchors(units, settings()), units) == [[0, 1, 2, 3]]  # 0.85 for "// 3"
    assert anchor_rows(mine_anchors(units, settings(sim_thresh=0.9)), units) == [[0, 1, 2]]
    assert anchor_rows(mine_anchors(units, settings(sim_thresh=0.99)), units) == [[0, 1]]
    assert anchor_rows(mine_anchors(units, settings("exact_only", sim_thresh=0.99)), units) == [[0, 1]]


def test_equal_block_of_multiline_subdiffs_and_its_characters():
    # two-line inserts sharing their first line only: an equal block anchors that line
    rows = [[subdiff("x = 1\nprint(y)", old="", kind="insert", span=(0, 14))],
            [subdiff("x = 1\nreturn z + 42", old="", kind="insert", span=(2, 21))]]
    units = units_of(rows)
    anchors = mine_anchors(units, settings("full"))
    assert [(units[o.unit].row, o.lo, o.hi) for o in anchors[0]] == [(0, 0, 1), (1, 0, 1)]
    assert len(anchors) == 1  # the fallback's two whole units are not similar enough (0.67 < 0.8)
    # the occurrence's characters: its line inside the unit's span, when the action spells it out
    assert occurrence_chars(units[1], anchors[0][1], "> x = 1\nreturn z + 42") == (2, 7)
    assert occurrence_chars(units[1], anchors[0][1], "> insert two lines") == (2, 21)
    assert mine_anchors(units, settings("exact_only")) == []


def test_nonoverlap_cut_keeps_the_higher_score():
    units = [Unit(r, "replace", "old", ("l1", "l2"), (0, 5), (0, 2)) for r in range(4)]
    wide = [Occurrence(0, 0, 2), Occurrence(1, 0, 2), Occurrence(2, 0, 2)]  # 2 lines in rows 0-2
    narrow = [Occurrence(0, 1, 2), Occurrence(3, 1, 2)]  # 1 line in rows 0 and 3: overlaps wide in row 0
    s = settings()
    assert select_anchors([narrow, wide], s) == [wide, narrow]  # wide has the larger gain
    assert nonoverlap_cut([wide, narrow], units, s) == [wide]  # narrow keeps row 3 only: dropped
    beside = [Occurrence(0, 0, 1), Occurrence(3, 0, 1)]
    assert nonoverlap_cut([[Occurrence(0, 1, 2), Occurrence(1, 1, 2)], beside], units, s) == [
        [Occurrence(0, 1, 2), Occurrence(1, 1, 2)], beside]  # disjoint lines of one unit both stay


def test_one_occurrence_per_row_and_max_anchors():
    # row 0 makes the same change twice (two units): it counts once
    rows = [[subdiff("    return a + b"), subdiff("    return a + b", span=(4, 7))], [subdiff("    return a + b")],
            [subdiff("    return a * 2", old="    return a - 1", where=4)],
            [subdiff("    return a * 2", old="    return a - 1", where=4)]]
    units = units_of(rows)
    anchors = mine_anchors(units, settings())
    assert anchor_rows(anchors, units) == [[0, 1], [2, 3]]
    assert [o.unit for o in anchors[0]] == [0, 2]
    assert len(mine_anchors(units, settings(max_anchors=1))) == 1


def test_fallback_groups_by_position_when_nothing_aligned():
    # the same line rewritten from different code (an earlier edit changed it): no alignment scope is shared
    rows = [[subdiff("    return a + b", old="    return a * 2")],
            [subdiff("    return a + 1", old="    return a - 3")]]
    units = units_of(rows)
    assert anchor_rows(mine_anchors(units, settings()), units) == [[0, 1]]
    assert mine_anchors(units, settings("exact_only")) == []
    with pytest.raises(ValueError, match="overhead_mode 'fast'"):
        settings("fast")


def test_mining_is_deterministic():
    rows = [[subdiff(f"    return a {op} {x}", span=(0, 3))] for op in "+-*" for x in "ab12"]
    units = units_of(rows)
    runs = [mine_anchors(units, settings("full")) for _ in range(3)]
    assert runs[0] == runs[1] == runs[2] and runs[0]


class PieceTokenizer:
    """A tokenizer whose tokens are multi-character pieces (a BPE stand-in); id k decodes to pieces[k]."""

    def __init__(self, pieces, joined=True):
        self.pieces, self.joined = pieces, joined

    def decode(self, ids, skip_special_tokens=True):
        text = "".join(self.pieces[i] for i in ids)
        return text if self.joined else text.strip()

    def batch_decode(self, seqs, skip_special_tokens=True):
        return [self.decode(s) for s in seqs]


def test_token_columns_for_multi_character_tokens():
    tok = PieceTokenizer([" 1+", "b,", "2*2", ";"])
    text, ends = char_ends(tok, [0, 1, 2, 3])
    assert text == " 1+b,2*2;" and ends == [3, 5, 8, 9]
    lead = text.find("1+b,2*2")
    assert token_columns(ends, lead + 0, lead + 3) == (0, 2)  # "1+b": " 1+" and "b,"
    assert token_columns(ends, lead + 4, lead + 7) == (2, 3)  # "2*2"
    # pieces that do not add up to the text (the decoder strips): growing prefixes instead
    text, ends = char_ends(PieceTokenizer([" 1+", "b", ";"], joined=False), [0, 1, 2])
    assert text == "1+b;" and ends == [2, 3, 4]


def provider_rollouts(actions, rows, group):
    """Rollouts of one-turn rows whose responses are ``actions`` + ';' in the character tokenizer."""
    tok = build_char_tokenizer()
    ids = [tok(a + ";", add_special_tokens=False)["input_ids"] for a in actions]
    T = max(map(len, ids))
    response = torch.tensor([i + [0] * (T - len(i)) for i in ids])
    mask = torch.tensor([[1] * len(i) + [0] * (T - len(i)) for i in ids])
    N = len(actions)
    batch = RolloutBatch(prompt_ids=torch.ones(N, 1, dtype=torch.long), prompt_mask=torch.ones(N, 1, dtype=torch.long),
                         response_ids=response, response_mask=mask, group=torch.tensor(group),
                         rewards=torch.tensor([[1.0], [0.0], [1.0], [0.0]][:N]))
    batch.extras.update(traj=torch.arange(N), step=torch.zeros(N, dtype=torch.long),
                        step_reward=torch.tensor([1.0, 0.0, 0.9025, 0.0][:N]))
    records = [TurnRecord(i, 0, "ctx", a, "obs", 0.0, {"valid": True, "subdiffs": d}, 0, "p", None, None)
               for i, (a, d) in enumerate(zip(actions, rows))]
    ctx = ProviderContext(policy=SimpleNamespace(tokenizer=tok), models={}, engine=None, task=None,
                          components={"advantage": DiDPO()}, needs={"diff_anchor", "diff_lines", "diff_span"})
    return ctx, Rollouts(batch, list(actions), [None] * N, turns=records)


def test_provider_tensors_and_the_estimator_on_them():
    fix, wrong = subdiff("    return a + b", span=(0, 3)), subdiff("    return a * 2", old="    return a - 1", where=4)
    actions = ["1+b,2*2", "1+b", "2*2", "t"]
    rows = [[fix, {**wrong, "span": [4, 7]}], [fix], [wrong], []]
    ctx, rollouts = provider_rollouts(actions, rows, [0, 0, 0, 0])
    assert PROVIDERS.get("diff_span").fn is diff_anchor
    out = diff_anchor(ctx, rollouts)
    assert out["diff_anchor"].tolist() == [[1, 2], [1, 0], [2, 0], [0, 0]]
    assert out["diff_lines"].tolist() == [[1, 1], [1, 0], [1, 0], [0, 0]]
    assert out["diff_span"].tolist() == [[[0, 3], [4, 7]], [[0, 3], [0, 0]], [[0, 3], [0, 0]], [[0, 0], [0, 0]]]
    assert ctx.metrics["didpo/root_subdiffs"] == 4 and ctx.metrics["didpo/unmapped_rows"] == 0
    again = diff_anchor(*provider_rollouts(actions, rows, [0, 0, 0, 0]))
    assert all(torch.equal(out[k], again[k]) for k in out)
    batch = rollouts.batch
    batch.extras.update(out)
    adv = DiDPO()(batch).advantages
    # row 0: A^E 0.5; "1+b" with rows 0, 1 (G 1, 0): +0.5; "2*2" with rows 0, 2 (G 1, 0.9025): +0.04875
    torch.testing.assert_close(adv[0, :8], torch.tensor([1.0, 1.0, 1.0, 0.5, 0.54875, 0.54875, 0.54875, 0.5]))


def test_provider_keeps_task_groups_apart_and_needs_turns():
    fix = subdiff("    return a + b")
    ctx, rollouts = provider_rollouts(["1+b"] * 4, [[fix]] * 4, [0, 0, 1, 2])
    assert diff_anchor(ctx, rollouts)["diff_anchor"][:, 0].tolist() == [1, 1, 0, 0]
    rollouts.turns = None
    with pytest.raises(ValueError, match="multi_turn"):
        diff_anchor(ctx, rollouts)
