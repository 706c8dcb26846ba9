"""VERPO's evidence channel: directions (Fixed / CTR / FEC), the benefit/cost weight, and the loss whose logit
gradient is exactly -w.s."""
import pytest
import torch

from polo.core.registry import REGULARIZERS
from polo.core.regularizers.verpo_evidence import (VerpoEvidence, evidence_direction, evidence_weight,
                                                    fisher_inner, support_index)

from .helpers import build_batch, close

P = [0.5, 0.3, 0.2]
Q0 = [0.4, 0.4, 0.2]
QE = [0.7, 0.2, 0.1]
QPOS, QNEG = [0.6, 0.3, 0.1], [0.3, 0.4, 0.3]


def t(x):
    return torch.tensor(x, dtype=torch.float64)


def one_token_batch(advantage=1.2, positive=QE, negative=QNEG):
    """§8: one token, vocabulary 3, sampled token 0."""
    b = build_batch([1.0])
    b.advantages = t([[advantage]])
    b.extras.update(teacher_dist=t([[Q0]]).log(), teacher_dist_sibling=t([[positive]]).log(),
                    teacher_dist_negative=t([[negative]]).log(), sibling_present=t([1.0]), negative_present=t([1.0]))
    return b


def test_fixed_worked_example():
    p = t(P)
    s = evidence_direction("fixed", p, t(Q0), t(QE), None, 1e-8)
    close(s, [0.3, -0.2, -0.1])
    close(s[0] - (p * s).sum(), 0.23)  # zeta
    close(fisher_inner(p, s, s), 0.0541)  # cost c = Var_p(s)
    close(evidence_weight(p, s, torch.tensor(0), t(1.2), 0.0025, 2.5e-5), 0.9994)
    close(evidence_weight(p, s, torch.tensor(0), t(1.2), 1.0, 0.01), 0.8115)


@pytest.mark.parametrize("cost_alpha, cost_epsilon, weight, loss", [(0.0025, 2.5e-5, 0.9994, -0.1937),
                                                                   (1.0, 0.01, 0.8115, -0.1573)])
def test_fixed_loss_and_its_logit_gradient(cost_alpha, cost_epsilon, weight, loss):
    reg = VerpoEvidence(direction="fixed", cost_alpha=cost_alpha, cost_epsilon=cost_epsilon)
    logits = t([[P]]).log().requires_grad_(True)
    out = reg(torch.zeros(1, 1), one_token_batch(), logits.log_softmax(-1))
    close(out.token_loss, [[loss]])
    close(out.metrics["weight"], weight)
    out.token_loss.sum().backward()
    close(logits.grad[0, 0], -weight * t([0.3, -0.2, -0.1]))  # exactly -w.s
    if cost_alpha == 1.0:
        close(logits.grad[0, 0], [-0.2435, 0.1623, 0.0812])


def test_fec_worked_example():
    p = t(P)
    task, nuisance = t(QPOS) - t(QNEG), (t(QPOS) + t(QNEG)) / 2 - t(Q0)
    close(task, [0.3, -0.1, -0.2])
    close(nuisance, [0.05, -0.05, 0.0])
    close(fisher_inner(p, task, nuisance) / (fisher_inner(p, nuisance, nuisance) + 1e-8), 4.3158)
    s = evidence_direction("fec", p, t(Q0), t(QPOS), t(QNEG), 1e-8)
    close(s, [0.0842, 0.1158, -0.2000])
    zeta = s[0] - (p * s).sum()
    close(zeta, 0.0474)
    close(1.2 * zeta, 0.0568)  # benefit h
    close(fisher_inner(p, s, s), 0.0142)  # cost c
    close(evidence_weight(p, s, torch.tensor(0), t(1.2), 0.0025, 2.5e-5), 0.9989)
    close(evidence_weight(p, s, torch.tensor(0), t(1.2), 1.0, 0.01), 0.7013)
    reg = VerpoEvidence(direction="fec")  # the same through the regularizer, gradient -w.s
    logits = t([[P]]).log().requires_grad_(True)
    out = reg(torch.zeros(1, 1), one_token_batch(positive=QPOS), logits.log_softmax(-1))
    close(out.metrics["weight"], 0.9989)
    out.token_loss.sum().backward()
    close(logits.grad[0, 0], -0.9989 * s, atol=1e-4)
    close(evidence_direction("ctr", p, t(Q0), t(QPOS), t(QNEG), 1e-8), task)


def test_negative_advantage_gives_zero_weight():
    for direction in ("fixed", "ctr", "fec"):
        out = VerpoEvidence(direction=direction)(torch.zeros(1, 1), one_token_batch(advantage=-1.2),
                                                t([[P]]).log())
        assert out.token_loss.item() == 0 and out.metrics["weight"] == 0, direction


def test_scope_is_rows_with_evidence():
    b = build_batch([1.0, 0.0, 1.0], mask=torch.tensor([[1, 1], [1, 0], [1, 1]]))
    b.extras["sibling_present"] = t([1.0, 1.0, 0.0])
    b.extras["negative_present"] = t([1.0, 0.0, 1.0])
    close(VerpoEvidence(direction="fixed").scope(b), [[1, 1], [1, 0], [0, 0]])
    close(VerpoEvidence(direction="fec").scope(b), [[1, 1], [0, 0], [0, 0]])
    assert VerpoEvidence(direction="fixed").needs() == {"teacher_dist", "teacher_dist_sibling", "sibling_present"}
    assert {"teacher_dist_negative", "negative_present"} <= VerpoEvidence(direction="ctr").needs()


def test_rows_without_evidence_and_padding_give_zero_and_finite_gradients():
    b = one_token_batch()
    b.extras["sibling_present"] = t([0.0])
    b.extras["teacher_dist_sibling"] = torch.zeros(1, 1, 3, dtype=torch.float64)  # no sibling: zeros
    logits = torch.zeros(1, 1, 3, dtype=torch.float64, requires_grad=True)
    out = VerpoEvidence()(torch.zeros(1, 1), b, logits.log_softmax(-1))
    assert out.token_loss.item() == 0
    out.token_loss.sum().backward()
    assert torch.equal(logits.grad, torch.zeros_like(logits))


def test_top_k_support_index_and_loss():
    ids = torch.tensor([[[2, 0]]])
    assert support_index(torch.tensor([[0]]), ids).tolist() == [[1]]
    assert support_index(torch.tensor([[1]]), ids).tolist() == [[2]]  # not among the top-k: the tail bin
    b = one_token_batch()
    for name in ("teacher_dist", "teacher_dist_sibling"):
        b.extras[name] = b.extras[name].gather(-1, ids)
    b.extras["teacher_dist_ids"] = ids
    out = VerpoEvidence(direction="fixed")(torch.zeros(1, 1), b, t([[P]]).log())
    # support [id 2, id 0, tail {id 1}]: q0 [0.2, 0.4, 0.4], qe [0.1, 0.7, 0.2], p [0.2, 0.5, 0.3]; the same three
    # bins as the vocabulary, so the loss equals the full-vocabulary one
    close(out.token_loss, [[-0.1937]])


def test_registered():
    assert REGULARIZERS.get("verpo_evidence") is VerpoEvidence


# ---- mutation-testing kills (docs/mutation.md): the formulas act row by row over the last dim
def test_fisher_inner_and_weight_are_per_row():
    p = t([[0.5, 0.25, 0.25], [0.2, 0.3, 0.5]])
    # row 0: E[ab] − E[a]E[b] = 0.5 − 0.5·0.5; row 1: 0.3 − 0.3·0.8
    close(fisher_inner(p, t([[1, 0, 0], [0, 1, 0]]), t([[1, 0, 0], [0, 1, 1]])), [0.25, 0.06])
    # row 0: ζ = 0.2 − 0.05, c = 0.0225, Â = 1; row 1: ζ = 0.1 + 0.02, c = 0.0076, Â = 2; a_c = 1, ε_c = 0
    s = t([[0.2, -0.1, -0.1], [0.0, 0.1, -0.1]])
    w = evidence_weight(p, s, torch.tensor([0, 1]), t([1.0, 2.0]), 1.0, 0.0)
    close(w, [0.15 / 0.1725, 0.24 / 0.2476])


def test_support_index_per_token_and_the_tail_bin():
    ids = torch.tensor([[[5, 7], [2, 9]]])  # top-2 ids of two tokens
    assert support_index(torch.tensor([[7, 3]]), ids).tolist() == [[1, 2]]  # 7 is second; 3 falls in the tail (k)


def test_needs_name_the_negative_sibling_except_for_fixed():
    base = {"teacher_dist", "teacher_dist_sibling", "sibling_present"}
    assert VerpoEvidence(direction="fixed").needs() == base
    assert VerpoEvidence(direction="ctr").needs() == base | {"teacher_dist_negative", "negative_present"}


def test_fixed_reads_no_negative_sibling_and_reports_its_metrics():
    b = one_token_batch()
    del b.extras["teacher_dist_negative"], b.extras["negative_present"]
    out = VerpoEvidence(direction="fixed")(torch.zeros(1, 1), b, t([[P]]).log())
    close(out.token_loss, [[-0.1937]])  # §8's fixed worked example, without the negative in the batch
    assert out.metrics["accepted_frac"] == 1.0 and out.metrics["evidence_token_frac"] == 1.0


def test_fec_adds_eps_to_a_nuisance_variance_smaller_than_itself():
    # vocabulary 2, p = [½, ½]: aᵀFb = ¼(a₁ − a₂)(b₁ − b₂). q± = [0.7 + d, 0.3 − d], [0.3 + d, 0.7 − d], q0 = [½, ½]
    # → task = [0.4, −0.4], nuisance = [d, −d]; d = 1e-4: aᵀFn = 0.4·d = 4e-5, nᵀFn = d² = 1e-8;
    # eps 3e-8: α = 4e-5/4e-8 = 1000, s = task − α·nuisance = [0.3, −0.3]
    d = 1e-4
    s = evidence_direction("fec", t([0.5, 0.5]), t([0.5, 0.5]), t([0.7 + d, 0.3 - d]), t([0.3 + d, 0.7 - d]), 3e-8)
    torch.testing.assert_close(s, t([0.3, -0.3]), rtol=0, atol=1e-6)


def test_support_index_of_a_second_hit_at_the_first_place():
    ids = torch.tensor([[[5, 7], [2, 9]]])
    assert support_index(torch.tensor([[7, 2]]), ids).tolist() == [[1, 0]]  # each token's own place


def test_loss_per_row_in_the_students_dtype_and_the_accepted_fraction():
    # two §8 rows (fixed direction, loss −0.1937 at Â = 1.2); the second has Â = −1.2: weight 0, loss 0
    b = build_batch([1.0, 1.0], mask=torch.ones(2, 1))
    b.rewards = b.rewards.float()
    b.advantages = t([[1.2], [-1.2]])  # float64 advantages, float32 student and teachers
    b.extras.update(teacher_dist=torch.tensor([[Q0]] * 2).log(), teacher_dist_sibling=torch.tensor([[QE]] * 2).log(),
                    sibling_present=torch.ones(2))
    out = VerpoEvidence(direction="fixed")(torch.zeros(2, 1), b, torch.tensor([[P]] * 2).log())
    assert out.token_loss.dtype == torch.float32
    close(out.token_loss, [[-0.1937], [0.0]])
    assert out.metrics["accepted_frac"] == pytest.approx(0.5)
