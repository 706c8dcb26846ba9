"""P2TPO (spec §17): UAP, SCR, missing-element charge and page advantage on the worked example; edges."""
import math

import pytest
import torch

from .helpers import build_batch, close
from polo.methods.p2tpo.advantage import P2TPO, anchor_pricing

Q = [[1.0, 0.6, 0.8], [1.0, 0.9, 0.0]]


def element_batch(quality, spans, labels, boundary, group=None, width=None):
    labels = [list(r) for r in labels]
    T = width or max(map(len, labels))
    mask = torch.ones(len(quality), T, dtype=torch.long)
    batch = build_batch([[sum(q) / len(q)] for q in quality], group, mask)
    batch.extras.update(element_quality=torch.tensor(quality, dtype=torch.float64), element_span=torch.tensor(spans),
                        element_label=torch.tensor([r + [-1] * (T - len(r)) for r in labels]),
                        element_boundary=torch.tensor(boundary))
    return batch


def worked_batch():
    # rollout 1: "sep, e1 (2 tokens), sep, e2 (5 tokens: c c e c e), sep, e3 (2 tokens), EOS"  -> 14 tokens
    # rollout 2: "sep, e1 (2), sep, e2 (3 tokens, all correct), EOS"; e3 missing -> boundary is the EOS (col 7)
    spans = [[[1, 3], [4, 9], [10, 12]], [[1, 3], [4, 7], [0, 0]]]
    c, e, o = 1, 0, -1
    labels = [[o, c, c, o, c, c, e, c, e, o, c, c, o, o], [o, c, c, o, c, c, c, o] + [o] * 6]
    return element_batch(Q, spans, labels, [[-1, -1, -1], [-1, -1, 7]])


def test_uap_worked_example():
    q = torch.tensor(Q, dtype=torch.float64)
    a, anchored = anchor_pricing(q, torch.isfinite(q), torch.zeros(2, dtype=torch.long), 1.0, 1e-8)
    close(a, [[0.0, -0.15, 0.40], [0.0, 0.15, -0.40]])
    assert anchored.tolist() == [[True, False, False], [True, False, False]]


def test_worked_example_tokens():
    result = P2TPO(kappa=0.5)(worked_batch())
    adv = result.advantages
    # rollout 1, element 2 (cols 4..8): C = -0.75 redistributed toward its two error tokens, sum kept
    close(adv[0, 4:9], [-0.0833, -0.0833, -0.2500, -0.0833, -0.2500])
    close(adv[0, 4:9].sum(), -0.75)
    close(adv[0, 1:3], [0.0, 0.0])  # element 1 identical at the ceiling
    close(adv[0, 10:12], [0.4, 0.4])  # element 3: a = 0.40, all correct -> uniform
    # page advantages U - mean U = [0.0833, -0.0833] on the separators and EOS
    close(adv[0, [0, 3, 9, 12, 13]], [0.0833] * 5)
    close(adv[1, [0, 3]], [-0.0833] * 2)
    # rollout 2: element 2 (a = +0.15, all correct) uniform; missing element 3 charges -0.40 to its EOS boundary
    close(adv[1, 4:7], [0.15] * 3)
    close(adv[1, 7], -0.0833 - 0.40)
    assert result.diagnostics["p2tpo/missing_frac"] == pytest.approx(1 / 6)
    assert result.diagnostics["p2tpo/anchored_frac"] == pytest.approx(2 / 6)


def test_identical_imperfect_element_is_priced_against_the_ceiling():
    q = [[0.5, 1.0], [0.5, 0.0]]
    batch = element_batch(q, [[[0, 2], [2, 4]], [[0, 2], [0, 0]]], [[1, 0, 1, 1], [1, 0, -1, -1]],
                          [[-1, -1], [-1, 2]])
    adv = P2TPO(kappa=0.0)(batch).advantages
    close(adv[:, :2], [[-0.5, -0.5], [-0.5, -0.5]])  # a = 0.5 - q_max on both, C = -1.0 over 2 tokens
    close(adv[1, 2], 0.5 * (0.25 - 0.75) * 0 + (0.25 - 0.75) / 2 * 0 + (-0.25) - 0.5)  # page -0.25, charge -0.5


def test_single_sample_masked_tokens_and_padded_elements():
    # one lone rollout: equal to itself, so every element is priced against q_max; page advantage 0
    batch = element_batch([[1.0, 0.5, math.nan]], [[[0, 1], [1, 3], [0, 0]]], [[1, 1, 0, -1]], [[-1, -1, -1]])
    batch.response_mask[0, 3] = 0
    adv = P2TPO()(batch).advantages
    close(adv[0], [0.0, -1.0 * 0.5 / 2, -1.0 * 1.5 / 2, 0.0])  # a = 0.5 - 1, C = -1.0, u = [0.5, 1.5]


def test_bad_inputs():
    batch = worked_batch()
    batch.extras["element_quality"][0, 0] = 1.5
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        P2TPO()(batch)
    batch = worked_batch()
    batch.extras["element_boundary"][1, 2] = 99
    with pytest.raises(ValueError, match="column"):
        P2TPO()(batch)
    batch = worked_batch()
    del batch.extras["element_label"]
    with pytest.raises(ValueError, match="element_label"):
        P2TPO()(batch)
    with pytest.raises(ValueError, match="kappa"):
        P2TPO(kappa=1.0)

