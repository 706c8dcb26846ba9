"""Distillation math: generalized JSD (both papers' conventions), its KL limits, top-k tail bins, entropy."""
import math

import pytest
import torch

from polo.core.distill import (entropy, fill_invalid, generalized_jsd, kl, on_common_support,
                               tail_logprob, with_tail)

from .helpers import close


def logs(*rows):
    return torch.tensor(rows, dtype=torch.float64).log()


def test_kepo_worked_example():
    # §9: p_s = [0.5, 0.3, 0.2], p_t = [0.2, 0.7, 0.1], beta = 0.5 (M = (1-b) p_s + b p_t) -> 0.0828
    student, teacher = logs([0.5, 0.3, 0.2]), logs([0.2, 0.7, 0.1])
    close(generalized_jsd(student, teacher, 0.5), [0.0828])
    mix = (0.5 * student.exp() + 0.5 * teacher.exp()).log()
    close(generalized_jsd(student, teacher, 0.5), 0.5 * kl(teacher, mix) + 0.5 * kl(student, mix), atol=1e-12)


def test_srpo_worked_example_per_token_jsd_and_entropy():
    # §2: alpha = 0.5, student p and teacher q on two tokens of a 3-token vocabulary
    p = logs([0.6, 0.3, 0.1], [0.2, 0.5, 0.3])
    q = logs([0.1, 0.8, 0.1], [0.34, 0.33, 0.33])
    close(generalized_jsd(p, q, 0.5), [0.1580, 0.0183])
    close(entropy(q), [0.6390, 1.0985])


@pytest.mark.parametrize("beta", [0.1, 0.3, 0.8])
def test_both_conventions_weigh_the_teacher(beta):
    """§2 writes M = (1-a) p + a q, (1-a) KL(p||M) + a KL(q||M); §9 writes M = (1-b) p_s + b p_t,
    b KL(p_t||M) + (1-b) KL(p_s||M): with p = p_s the student and q = p_t the teacher both are generalized_jsd
    with beta = a = b. Checked off the symmetric point 0.5, where swapping the arguments would show."""
    p, q = logs([0.6, 0.3, 0.1]), logs([0.1, 0.8, 0.1])
    m = ((1 - beta) * p.exp() + beta * q.exp()).log()
    srpo = (1 - beta) * kl(p, m) + beta * kl(q, m)
    kepo = beta * kl(q, m) + (1 - beta) * kl(p, m)
    close(generalized_jsd(p, q, beta), srpo, atol=1e-12)
    close(generalized_jsd(p, q, beta), kepo, atol=1e-12)
    assert not torch.allclose(generalized_jsd(p, q, beta), generalized_jsd(q, p, beta))


def test_limits_are_the_two_kls():
    p, q = logs([0.6, 0.3, 0.1]), logs([0.1, 0.8, 0.1])
    forward, reverse = kl(q, p), kl(p, q)  # KL(teacher||student), KL(student||teacher)
    close(generalized_jsd(p, q, 0.0), forward, atol=1e-12)
    close(generalized_jsd(p, q, 1.0), reverse, atol=1e-12)
    small = 1e-5  # JSD_b / b -> forward KL, JSD_b / (1 - b) -> reverse KL
    close(generalized_jsd(p, q, small) / small, forward, atol=1e-4)
    close(generalized_jsd(p, q, 1 - small) / small, reverse, atol=1e-4)
    with pytest.raises(ValueError, match="beta"):
        generalized_jsd(p, q, 1.5)


def test_zero_probabilities_give_finite_values_and_gradients():
    student = torch.tensor([0.0, 2.0, -torch.inf], dtype=torch.float64, requires_grad=True)
    teacher = torch.tensor([0.9, 0.1, 0.0], dtype=torch.float64).log()
    for beta in (0.0, 0.5, 1.0):
        value = generalized_jsd(student.log_softmax(-1), teacher, beta)
        (grad,) = torch.autograd.grad(value, student)
        assert torch.isfinite(value) and torch.isfinite(grad).all(), beta
    assert entropy(teacher) == pytest.approx(-(0.9 * math.log(0.9) + 0.1 * math.log(0.1)))


def test_top_k_tail_bin_sums_to_one_and_is_stable():
    full = torch.randn(4, 5, 50, dtype=torch.float64, generator=torch.Generator().manual_seed(0)).log_softmax(-1)
    top = full.topk(7, -1).values
    binned = with_tail(top)
    close(binned.exp().sum(-1), torch.ones(4, 5), atol=1e-12)
    rest = full.exp().sum(-1) - top.exp().sum(-1)
    close(tail_logprob(top), rest.log(), atol=1e-10)
    # a top-k mass of 1e-12 (logsumexp = log 1e-12): the tail 1 - 1e-12 without cancellation
    small = torch.tensor([math.log(1e-12)], dtype=torch.float64)
    assert tail_logprob(small).item() == pytest.approx(math.log1p(-1e-12), abs=1e-15)
    # all mass in the top-k: the smallest normal float32, not -inf (and a finite gradient)
    top = torch.zeros(1, requires_grad=True)
    assert tail_logprob(top).item() == pytest.approx(math.log(torch.finfo(torch.float32).tiny))
    tail_logprob(top).backward()
    assert torch.isfinite(top.grad).all()


def test_common_support_gathers_the_student_at_the_teacher_ids():
    student = torch.tensor([[[0.5, 0.2, 0.2, 0.1]]], dtype=torch.float64).log()
    teacher_full = torch.tensor([[[0.1, 0.6, 0.25, 0.05]]], dtype=torch.float64).log()
    ids = torch.tensor([[[1, 2]]])
    s, (t,) = on_common_support(student, [teacher_full.gather(-1, ids)], ids, torch.ones(1, 1))
    close(s.exp(), [[[0.2, 0.2, 0.6]]])
    close(t.exp(), [[[0.6, 0.25, 0.15]]])
    s, (t,) = on_common_support(student, [teacher_full], None, torch.ones(1, 1))
    assert torch.equal(s, student) and torch.equal(t, teacher_full)


def test_invalid_positions_become_uniform():
    padded = torch.zeros(1, 2, 4)  # polo stores padding's log-probs as 0 (not a distribution)
    filled = fill_invalid(padded, torch.tensor([[1, 0]]))
    assert torch.equal(filled[0, 0], padded[0, 0])
    close(filled[0, 1].exp(), [0.25] * 4)
    close(fill_invalid(padded[..., :2], torch.tensor([[0, 0]]), vocab=4).exp(), torch.full((1, 2, 2), 0.25))


def test_nan_inputs_propagate():
    """A NaN distribution is a bug upstream: it shows in the divergence instead of being hidden."""
    p, q = logs([0.6, 0.3, 0.1]), torch.tensor([float("nan")] * 3, dtype=torch.float64)
    assert torch.isnan(generalized_jsd(p, q, 0.5))
