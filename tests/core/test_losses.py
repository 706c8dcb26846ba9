import math

import pytest
import torch

from polo.core.losses import CISPO, GSPO, PPOClip, Reinforce, clipped_value_loss, entropy_from_logits
from polo.core.registry import POLICY_LOSSES, ConfigError

from .helpers import build_batch, close


def run(loss, ratio, adv, logp=None, mask=None):
    """Token losses, metrics and d loss.sum() / d logp for one row with the given ratios and advantages."""
    ratio = torch.as_tensor(ratio, dtype=torch.float64)[None]
    logp = torch.full_like(ratio, -1.0) if logp is None else torch.as_tensor(logp, dtype=torch.float64)[None]
    logp.requires_grad_(True)
    mask = torch.ones_like(ratio) if mask is None else torch.as_tensor(mask)[None]
    adv = torch.as_tensor(adv)[None] * mask
    batch = build_batch([0.0], mask=mask, old_logp=logp.detach() - ratio.log(), advantages=adv)
    out = loss(logp, batch)
    (out.token_loss * batch.mask).sum().backward()
    return out.token_loss[0].detach(), out.metrics, logp.grad[0]


def test_ppo_clip_worked_example_and_gradients():
    u, metrics, grad = run(PPOClip(dual_clip=3.0), [0.9, 1.1, 1.3, 0.7], [1.0, -1.0, 1.0, -1.0])
    close(u, [-0.9, 1.1, -1.2, 0.8])
    close(u.mean(), -0.05)
    close(grad, [-0.9, 1.1, 0.0, 0.0])  # d(−A·r)/dlogp = −A·r; clipped tokens 3, 4 get none
    close(metrics["clip_frac_high"], 0.25)
    close(metrics["clip_frac_low"], 0.25)
    close(metrics["clip_frac_dual"], 0.0)
    close(metrics["ratio_mean"], 1.0)


@pytest.mark.parametrize(
    "clip_high, expected", [(0.28, [-1.25, -1.28, 0.8, 0.85]), (0.2, [-1.2, -1.2, 0.8, 0.85])]
)
def test_ppo_clip_higher_worked_example(clip_high, expected):
    u, _, _ = run(PPOClip(clip_high=clip_high), [1.25, 1.35, 0.75, 0.85], [1.0, 1.0, -1.0, -1.0])
    close(u, expected)


def test_ppo_dual_clip_bounds_negative_advantage_loss():
    u, metrics, grad = run(PPOClip(dual_clip=3.0), [5.0, 2.0, 5.0], [-1.0, -1.0, 1.0])
    close(u, [3.0, 2.0, -1.2])
    close(grad, [0.0, 2.0, 0.0])
    close(metrics["clip_frac_dual"], 1 / 3)
    u, _, _ = run(PPOClip(), [5.0], [-1.0])
    close(u, [5.0])


def test_ppo_dual_clip_must_exceed_one():
    with pytest.raises(ConfigError, match="dual_clip"):
        POLICY_LOSSES.build({"name": "ppo_clip", "dual_clip": 1.0})


def test_gspo_worked_example():
    log_ratio = torch.tensor([0.1, -0.2, 0.05], dtype=torch.float64)
    u, metrics, grad = run(GSPO(), log_ratio.exp(), [1.0] * 3)
    close(u, [-0.9835] * 3)
    close(grad, [-0.9835] * 3)  # d s_{i,t} / d logp_t = s_i
    close(metrics["clip_frac_high"], 0.0)
    u, metrics, grad = run(GSPO(), log_ratio.exp(), [-1.0] * 3)
    close(u, [0.9997] * 3)
    close(grad, [0.0] * 3)
    close(metrics["clip_frac_low"], 1.0)


def test_gspo_sequence_ratio_ignores_masked_tokens():
    u, _, grad = run(GSPO(), [math.exp(0.1), math.exp(-0.2), math.exp(0.05), 100.0], [1.0] * 4, mask=[1, 1, 1, 0])
    close(u[:3], [-0.9835] * 3)
    assert grad[3] == 0


def test_cispo_worked_example():
    u, metrics, grad = run(CISPO(), [0.5, 1.0, 6.0], [1.0] * 3, logp=[-2.0, -1.0, -0.5])
    close(u, [1.0, 1.0, 2.5])
    close(grad, [-0.5, -1.0, -5.0])
    close(metrics["clip_frac_high"], 1 / 3)


def test_cispo_two_sided():
    u, _, grad = run(CISPO(two_sided=True), [0.5, 1.0, 6.0], [1.0] * 3, logp=[-2.0, -1.0, -0.5])
    close(grad, [-0.8, -1.0, -1.2])
    close(u, [1.6, 1.0, 0.6])


def test_reinforce():
    u, metrics, grad = run(Reinforce(), [1.0, 3.0], [2.0, -1.0], logp=[-0.5, -2.0])
    close(u, [1.0, -2.0])
    close(grad, [-2.0, 1.0])
    assert metrics == {} and Reinforce().needs() == set()


@pytest.mark.parametrize("name", ["ppo_clip", "gspo", "cispo", "reinforce"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_extreme_log_ratios_stay_finite(name, dtype):
    loss = POLICY_LOSSES.build({"name": name} if name != "ppo_clip" else {"name": name, "dual_clip": 3.0})
    old = torch.zeros(2, 3, dtype=dtype)
    logp = torch.tensor([[50.0, -50.0, 0.0], [-50.0, 50.0, 50.0]], dtype=dtype, requires_grad=True)
    adv = [[1.0, -1.0, 1.0], [-1.0, 1.0, 0.0]]
    batch = build_batch([0.0, 0.0], mask=[[1, 1, 1], [1, 1, 0]], old_logp=old, advantages=adv)
    out = loss(logp, batch)
    (out.token_loss * batch.mask).sum().backward()
    assert torch.isfinite(out.token_loss).all() and torch.isfinite(logp.grad).all()
    assert all(torch.isfinite(v) and not v.requires_grad for v in out.metrics.values())


def test_value_loss_worked_example():
    loss = clipped_value_loss(torch.tensor([0.9, 0.2]), torch.tensor([0.5, 0.5]), torch.tensor([1.0, 0.0]), 0.2)
    close(loss, [0.045, 0.045])
    close(loss.mean(), 0.0450)
    close(clipped_value_loss(torch.tensor([0.9]), torch.tensor([0.5]), torch.tensor([1.0]), None), [0.005])


def test_entropy_matches_definition_and_chunks():
    logits = torch.randn(2, 5, 7, dtype=torch.float64)
    p = logits.softmax(-1)
    close(entropy_from_logits(logits), -(p * p.log()).sum(-1))
    close(entropy_from_logits(logits, chunk_size=3), entropy_from_logits(logits))
    close(entropy_from_logits(torch.zeros(1, 4)), [math.log(4)])
    assert entropy_from_logits(logits.to(torch.bfloat16)).dtype == torch.float32


def test_entropy_stable_for_huge_and_infinite_logits():
    inf = float("inf")
    logits = torch.tensor([[1e4, 0.0, -1e4, -inf], [0.0, 0.0, -inf, -inf]], requires_grad=True)
    h = entropy_from_logits(logits)
    h.sum().backward()
    close(h, [0.0, math.log(2)])
    assert torch.isfinite(logits.grad).all()


# ---- mutation-testing kills (docs/mutation.md)
def test_ppo_dual_clip_leaves_positive_advantages_alone():
    u, metrics, _ = run(PPOClip(dual_clip=3.0), [1.0], [0.5])  # A = 0.5 > 0: u = −A·r, never −A·c
    close(u, [-0.5])
    close(metrics["clip_frac_dual"], 0.0)


def test_cispo_one_sided_reports_no_lower_clip_and_names_its_metrics():
    _, metrics, _ = run(CISPO(), [1.0, 1.2], [1.0, -1.0])  # w = min(r, 5) = r: nothing clipped
    close(metrics["clip_frac_low"], 0.0)
    close(metrics["ratio_mean"], 1.1)


def test_gspo_sequence_log_ratio_is_capped_at_ten():
    u, metrics, _ = run(GSPO(), [math.exp(10.5)], [-1.0])  # A < 0: u = −A·s, s = exp(min(10.5, 10))
    close(u / math.exp(10), [1.0], atol=1e-9)


def test_ppo_dual_clip_bound_itself_is_not_clipped():
    # r = e^0.5 and dual_clip = e^0.5 (the same float64), A = −1: u = r equals the bound −A·c; not dual-clipped,
    # so the gradient −A·r still flows
    c = float(torch.tensor(0.5, dtype=torch.float64).exp())
    logp = torch.zeros(1, 1, dtype=torch.float64, requires_grad=True)
    batch = build_batch([0.0], old_logp=[[-0.5]], advantages=[[-1.0]])
    out = PPOClip(dual_clip=c)(logp, batch)
    out.token_loss.sum().backward()
    assert out.metrics["clip_frac_dual"] == 0.0
    close(logp.grad, [[c]])


def test_the_log_ratio_is_capped_at_both_twenties():
    # log-ratios −20.5, +20.5, −25 are capped to −20, +20, −20 (float64): r = e^−20, e^20, e^−20 exactly
    from polo.core.losses.base import ratio

    r = ratio(torch.tensor([-20.5, 20.5, -25.0], dtype=torch.float64), torch.zeros(3, dtype=torch.float64))
    close(r / torch.tensor([math.exp(-20), math.exp(20), math.exp(-20)], dtype=torch.float64), [1.0, 1.0, 1.0],
          atol=1e-12)


def test_a_small_positive_advantage_clipped_above_counts_as_high_only():
    # A = 0.5, r = 2 > 1 + 0.2: clipped at the upper bound; it is a positive advantage, so clip_frac_low = 0
    from polo.core.losses.base import clipped_surrogate

    r, adv, mask = (torch.tensor([[2.0]], dtype=torch.float64), torch.tensor([[0.5]], dtype=torch.float64),
                    torch.ones(1, 1, dtype=torch.float64))
    _, metrics = clipped_surrogate(r, adv, mask, 0.2, 0.2)
    assert (float(metrics["clip_frac_low"]), float(metrics["clip_frac_high"])) == (0.0, 1.0)
