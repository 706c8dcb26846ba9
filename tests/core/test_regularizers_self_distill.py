"""SRPO's SDPO branch: entropy-weighted JSD toward the sibling-prompted teacher on routed rows, and the joint
loss of §2 with the GRPO branch (one shared token denominator)."""
import pytest
import torch

from polo.methods.srpo.advantage import SRPO
from polo.core.aggregation import StepCounts, TokenMean
from polo.core.losses.ppo_clip import PPOClip
from polo.core.registry import REGULARIZERS
from polo.methods.srpo.self_distill import SelfDistill
from polo.inputs.teacher_inputs import entropy_weight

from .helpers import build_batch, close

P = [[0.6, 0.3, 0.1], [0.2, 0.5, 0.3]]  # student on the failed rollout's two tokens
Q = [[0.1, 0.8, 0.1], [0.34, 0.33, 0.33]]  # the teacher shown a correct sibling


def srpo_batch(dtype=torch.float64):
    """§2's group: rollouts 1-2 correct, rollout 3 failed with a teacher; 2 tokens each, on-policy."""
    b = build_batch([1.0, 1.0, 0.0], mask=torch.ones(3, 2))
    b.extras["correct"] = torch.tensor([True, True, False])
    b.extras["sibling_present"] = torch.ones(3, dtype=dtype)
    b.old_logp = torch.zeros(3, 2, dtype=dtype)
    uniform = torch.full((2, 3), 1 / 3, dtype=dtype)
    b.extras["teacher_dist_sibling"] = torch.stack([uniform, uniform, torch.tensor(Q, dtype=dtype)]).log()
    routed = torch.tensor([[False] * 2, [False] * 2, [True] * 2])
    b.extras["sibling_entropy_weight"] = entropy_weight(b.extras["teacher_dist_sibling"], routed, 1.0)
    return b


def student_logprobs(dtype=torch.float64):
    uniform = torch.full((2, 3), 1 / 3, dtype=dtype)
    return torch.stack([uniform, uniform, torch.tensor(P, dtype=dtype)]).log()


def test_entropy_weights_of_the_worked_example():
    w = srpo_batch().extras["sibling_entropy_weight"]
    close(w[2], [1.2258, 0.7742])  # raw exp(-H) = [0.5278, 0.3334], mean 1 over the routed tokens
    assert (w[:2] == 0).all()


@pytest.mark.parametrize("scale, expected", [("std", -0.3503), ("none", -0.1876)])
def test_joint_loss_of_the_worked_example(scale, expected):
    b = srpo_batch()
    b.advantages = SRPO(scale=scale)(b).advantages
    logp = torch.zeros(3, 2, dtype=torch.float64)  # = old_logp: ratio 1, so the PG loss is -A
    counts = StepCounts.from_mask(b.mask, 2)
    pg = TokenMean()(PPOClip(clip_low=0.2, clip_high=0.28)(logp, b).token_loss, b.mask, counts)
    reg = SelfDistill()
    u = reg(logp, b, student_logprobs()).token_loss
    close((u * reg.scope(b)).sum(), 0.2079)  # SDPO-branch sum: w . JSD = 1.2258 * 0.1580 + 0.7742 * 0.0183
    term = (u * reg.scope(b)).sum() / reg.scope(b).sum()
    close(pg + term, expected)  # (GRPO-branch sum + SDPO-branch sum) / 6 tokens


def test_importance_correction_is_capped_and_detached():
    b = srpo_batch()
    logp = torch.tensor([[0.0, 0.0], [0.0, 0.0], [1.0, -1.0]], dtype=torch.float64, requires_grad=True)
    plain = SelfDistill(is_clip=None)(logp, b, student_logprobs()).token_loss
    capped = SelfDistill(is_clip=2.0)(logp, b, student_logprobs()).token_loss
    close(capped[2], plain[2] * torch.tensor([2.0, torch.e ** -1], dtype=torch.float64))
    assert not capped.requires_grad  # the ratio is a weight, not a path for gradient
    assert SelfDistill(is_clip=None).needs() == SelfDistill().needs() - {"old_logp"}


def test_only_routed_valid_tokens_carry_loss_and_gradient():
    b = srpo_batch()
    b.response_mask = torch.tensor([[1, 1], [1, 1], [1, 0]])
    b.extras["sibling_entropy_weight"] = entropy_weight(b.extras["teacher_dist_sibling"],
                                                        torch.tensor([[False] * 2, [False] * 2, [True, False]]), 1.0)
    student = student_logprobs().clone().requires_grad_(True)
    u = SelfDistill()(torch.zeros(3, 2, dtype=torch.float64), b, student).token_loss
    assert (u[:2] == 0).all() and u[2, 1] == 0 and u[2, 0] > 0
    u.sum().backward()
    assert (student.grad[:2] == 0).all() and (student.grad[2, 1] == 0).all() and (student.grad[2, 0] != 0).any()


def test_no_routed_row_gives_zero_and_padding_stays_finite():
    b = srpo_batch()
    b.extras["correct"] = torch.tensor([True, True, True])
    padded = torch.zeros(3, 2, 3, dtype=torch.float64)  # polo's padding log-probs: 0, not a distribution
    u = SelfDistill()(torch.zeros(3, 2, dtype=torch.float64), b, padded).token_loss
    assert torch.equal(u, torch.zeros(3, 2, dtype=torch.float64))


def test_top_k_teacher_with_tail_bin():
    """With the teacher's top-2 ids of each token, the loss is the JSD on [top-2, tail] of both."""
    b = srpo_batch()
    full = b.extras["teacher_dist_sibling"]
    ids = full.topk(2, -1).indices
    b.extras["teacher_dist_ids"] = ids
    b.extras["teacher_dist_sibling"] = full.gather(-1, ids)
    u = SelfDistill(is_clip=None)(torch.zeros(3, 2, dtype=torch.float64), b, student_logprobs()).token_loss
    # token 0: teacher top-2 ids [1, 0] -> teacher [0.8, 0.1 | 0.1], student [0.3, 0.6 | 0.1]; the same 3 bins
    # as the full vocabulary, so the value is unchanged there
    full_u = SelfDistill(is_clip=None)(torch.zeros(3, 2, dtype=torch.float64), srpo_batch(),
                                      student_logprobs()).token_loss
    close(u[2, 0], full_u[2, 0], atol=1e-12)
    assert torch.isfinite(u).all()


def test_registered():
    assert REGULARIZERS.get("self_distill") is SelfDistill and SelfDistill.full_distribution
