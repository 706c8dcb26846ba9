import math

import pytest
import torch

from polo.core.losses.drpo import DRPO, segment_logsumexp
from polo.core.registry import POLICY_LOSSES, ConfigError

from .helpers import build_batch, close


def drpo_batch(scores, lengths, correct, group=None, width=1000, old_shift=0.0):
    """One leaf score per row, repeated over its ``lengths`` tokens (so s_i = score_i)."""
    s = torch.tensor(scores, dtype=torch.float64, requires_grad=True)
    mask = (torch.arange(width)[None] < torch.tensor(lengths)[:, None]).double()
    logp = s[:, None].expand(-1, width)
    batch = build_batch(correct, group=group, mask=mask, old_logp=logp.detach() + old_shift,
                        advantages=torch.zeros_like(mask))
    batch.extras["correct"] = torch.tensor(correct, dtype=torch.float64)
    return s, logp, batch


def test_worked_example_value_and_score_gradients():
    s, logp, batch = drpo_batch([-0.5, -0.7, -0.9, -1.2], [100, 300, 200, 400], [1.0, 1.0, 0.0, 0.0])
    out = DRPO()(logp, batch)
    close(out.loss.detach(), 6.4064)  # −J
    close(out.metrics["drpo_objective"], -6.4064)
    out.loss.backward()
    close(-s.grad, [0.8808, 0.1192, -0.5075, -0.4925])  # ∂J/∂s: q on positives, −softmax(s/τ) on negatives
    close((out.token_loss * batch.mask).sum(), 6.4064)
    close(out.metrics["length_weight_spread"], 0.8808 - 0.1192)  # the one used group's max q − min q


def test_length_weight_spread_is_zero_when_correct_answers_share_a_length():
    # group 0: two correct answers of one length (q = 1/2 each); group 1: one correct answer (q = 1); group 2
    # has no wrong answer (skipped); the spread averages the used groups 0 and 1
    scores, correct, group = [-0.5, -0.7, -0.9, -0.3, -0.4, -0.6, -0.8], [1.0, 1.0, 0.0, 1.0, 0.0, 1.0, 1.0], \
        [0, 0, 0, 1, 1, 2, 2]
    _, logp, batch = drpo_batch(scores, [200, 200, 300, 100, 500, 50, 90], correct, group)
    assert DRPO()(logp, batch).metrics["length_weight_spread"] == 0.0
    # group 0's second correct answer 100 tokens shorter: q ∝ exp((1 − ℓ)/λ) = exp(8), exp(9)
    _, logp, batch = drpo_batch(scores, [200, 100, 300, 100, 500, 50, 90], correct, group)
    q = torch.tensor([8.0, 9.0]).softmax(0)
    close(DRPO()(logp, batch).metrics["length_weight_spread"], float(q[1] - q[0]) / 2)


def test_trust_region_multiplier():
    s, logp, batch = drpo_batch([-0.5, -0.7, -0.9, -1.2], [100, 300, 200, 400], [1.0, 1.0, 0.0, 0.0],
                                old_shift=3e-4)
    out = DRPO()(logp, batch)
    close(out.metrics["kl_old"], 3e-4)
    close(out.metrics["trust_region_multiplier"], 0.2)
    out.loss.backward()
    pull = 0.2 * torch.tensor([100, 300, 200, 400]) / 1000  # −∂(0.2·KL)/∂s_i = 0.2·T_i/N pulls logp back up
    close(-s.grad, torch.tensor([0.8808, 0.1192, -0.5075, -0.4925]) + pull)


def test_positive_weights_are_never_negative():
    lengths = [100, 500, 950, 300, 600, 1000]
    s, logp, batch = drpo_batch([-1.0] * 6, lengths, [1.0, 1.0, 1.0, 0.0, 0.0, 0.0])
    DRPO()(logp, batch).loss.backward()
    close(-s.grad[:3], [0.9818, 0.0180, 0.0002])


def test_groups_without_both_outcomes_are_skipped_but_counted():
    s, logp, batch = drpo_batch([-0.5, -0.7, -0.9, -1.2, -0.3, -0.4, -2.0], [100, 300, 200, 400, 50, 60, 70],
                                [1.0, 1.0, 0.0, 0.0, 1.0, 1.0, 0.0], group=[0, 0, 0, 0, 1, 1, 2])
    out = DRPO()(logp, batch)
    close(out.loss.detach(), 6.4064 / 3)  # P_all = 3 groups; the all-correct and singleton groups add 0
    close(out.metrics["groups_used"], 1 / 3)
    out.loss.backward()
    close(-s.grad[:4] * 3, [0.8808, 0.1192, -0.5075, -0.4925])
    assert (s.grad[4:] == 0).all()


def test_k3_trust_region_and_validation():
    s, logp, batch = drpo_batch([-0.5, -0.9], [10, 10], [1.0, 0.0], width=10, old_shift=0.1)
    out = DRPO(kl_type="k3")(logp, batch)
    close(out.metrics["kl_old"], torch.tensor(-0.1).exp() - 1 + 0.1)
    with pytest.raises(ConfigError, match="kl_type"):
        POLICY_LOSSES.build({"name": "drpo", "kl_type": "k9"})


def test_whole_groups_and_trust_region_multiplier_per_micro_batch():
    assert DRPO.whole_groups and not POLICY_LOSSES.get("ppo_clip").whole_groups
    # groups 0 and 1, each one correct and one wrong response of 10 tokens; group 0's behaviour log-probs are
    # 3e-4 above the current ones (KL 3e-4), group 1's equal (KL 0)
    s, logp, batch = drpo_batch([-0.5, -0.9, -0.5, -0.9], [10] * 4, [1.0, 0.0, 1.0, 0.0], group=[0, 0, 1, 1],
                                width=10)
    batch.old_logp = batch.old_logp + torch.tensor([3e-4, 3e-4, 0.0, 0.0], dtype=torch.float64)[:, None]
    full = DRPO()(logp, batch).metrics
    close(full["kl_old"], 1.5e-4)
    close(full["trust_region_multiplier"], 0.05)  # β(KL − δ) = 1e3·(1.5e-4 − 1e-4)
    per_micro_batch = []
    for rows in (torch.tensor([0, 1]), torch.tensor([2, 3])):  # micro-batches cut on group boundaries
        per_micro_batch.append(float(DRPO()(logp[rows], batch.select(rows)).metrics["trust_region_multiplier"]))
    assert per_micro_batch == pytest.approx([0.2, 0.0])  # 1e3·(3e-4 − 1e-4), and KL 0 < δ


# ---- mutation-testing kills (docs/mutation.md)
def test_segment_logsumexp_is_shifted_and_an_empty_group_is_minus_inf():
    x = torch.tensor([1000.0, 1001.0, 5.0], dtype=torch.float64)
    inv, member = torch.tensor([0, 0, 1]), torch.tensor([True, True, False])
    out = segment_logsumexp(x, inv, member, 3)  # group 1's only row is not a member, group 2 has no row
    close(out[0], 1001 + math.log1p(math.exp(-1)))  # 1001.3133, no overflow of exp(1000)
    assert out[1:].tolist() == [-math.inf, -math.inf]


def test_one_token_rows_unused_groups_and_metrics():
    # group 0: one correct (q = 1) and one wrong answer: J = s₊ − τ·log exp(s₋/τ) = s₊ − s₋; row shares −s₊, s₋
    # group 1 is all correct (unused, share 0); a correct flag of 0.5 is not > 0.5: row 3 is wrong, so group 1 counts
    s, logp, batch = drpo_batch([-0.5, -0.9, -0.2, -0.4], [1, 2, 1, 1], [1.0, 0.0, 1.0, 1.0],
                                group=[0, 0, 1, 1], width=2, old_shift=0.1)
    out = DRPO()(logp, batch)
    close(out.token_loss, [[0.5, 0.0], [-0.45, -0.45], [0.0, 0.0], [0.0, 0.0]])  # −s₊/1, s₋/2 per token
    close(out.metrics["groups_used"], 0.5)
    close(out.metrics["ratio_mean"], math.exp(-0.1))  # exp(logp − old_logp)
    assert out.metrics["length_weight_spread"].dtype == torch.float64
    batch.extras["correct"] = torch.tensor([1.0, 0.0, 1.0, 0.5], dtype=torch.float64)
    close(DRPO()(logp, batch).metrics["groups_used"], 1.0)


def test_an_empty_batch_has_no_group():
    s, logp, batch = drpo_batch([-0.5, -0.9], [1, 2], [1.0, 0.0], width=2)
    out = DRPO()(logp[:0], batch.select(torch.arange(0)))
    assert out.metrics["drpo_objective"].item() == 0.0 and out.metrics["groups_used"].item() == 0.0
