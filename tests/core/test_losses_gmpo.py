import math

import pytest
import torch

from polo.core.losses.gmpo import GMPO

from .helpers import close
from .zoo_helpers import ratio_batch

DELTA = [0.5, -0.1, 0.2]


@pytest.mark.parametrize("adv, mean_log_ratio, grad_tokens", [(1.0, 0.4 / 3 + 0.1 / 3, [0, 1, 1]),
                                                               (-1.0, 0.2, [1, 1, 1])])
def test_log_space_token_clip_and_geometric_mean(adv, mean_log_ratio, grad_tokens):
    logp, batch = ratio_batch([math.exp(d) for d in DELTA], [adv] * 3)
    out = GMPO()(logp, batch)
    rho = math.exp(mean_log_ratio)
    close(out.token_loss[0].detach(), [-adv * rho] * 3)
    out.token_loss[0].mean().backward()  # seq_mean_token_mean of one row
    close(logp.grad[0], [-adv * rho / 3 * g for g in grad_tokens])
    close(out.metrics["clip_frac_high" if adv > 0 else "clip_frac_low"], 1 / 3)


def test_rows_are_independent_and_masks_respected():
    logp, batch = ratio_batch([[1.0, 5.0], [1.0, 1.0]], [[2.0, 2.0], [-1.0, -1.0]], mask=[[1, 0], [1, 1]])
    out = GMPO()(logp, batch)
    close(out.token_loss.detach(), [[-2.0, 0.0], [1.0, 1.0]])


# ---- mutation-testing kills (docs/mutation.md)
def test_lower_clip_binds_for_a_negative_advantage():
    # Δ = [−0.8, 0.1, 0.1], A = −1: max(Δ, clip(Δ, −0.4, 0.4)) = [−0.4, 0.1, 0.1], ρ = exp(−0.2/3)
    logp, batch = ratio_batch([math.exp(d) for d in (-0.8, 0.1, 0.1)], [-1.0] * 3)
    out = GMPO()(logp, batch)
    close(out.token_loss[0].detach(), [math.exp(-0.2 / 3)] * 3)
    close(out.metrics["clip_frac_low"], 1 / 3)


def test_each_row_has_its_own_geometric_mean():
    # row 0: Δ = 0 on its one valid token (ρ = 1, A = 2); row 1: Δ = 0.2 on both tokens (ρ = e^0.2, A = −1)
    logp, batch = ratio_batch([[1.0, 5.0], [math.exp(0.2)] * 2], [[2.0, 2.0], [-1.0, -1.0]], mask=[[1, 0], [1, 1]])
    out = GMPO()(logp, batch)
    close(out.token_loss.detach(), [[-2.0, 0.0], [math.exp(0.2)] * 2])
    close(out.metrics["ratio_mean"], (1 + math.exp(0.2)) / 2)


def test_the_log_ratio_is_capped_at_twenty_before_the_clip():
    # row 0: Δ = −25, A = 1: min(clamp(Δ, ±20), −0.4) = −20, u = −e^−20; row 1: Δ = 25, A = −1: max(20, 0.4) = 20,
    # u = e^20 (neither e^∓25 nor e^∓21)
    logp, batch = ratio_batch([[math.exp(-25)], [math.exp(25)]], [[1.0], [-1.0]])
    u = GMPO()(logp, batch).token_loss[:, 0].detach()
    close(u / torch.tensor([-math.exp(-20), math.exp(20)], dtype=torch.float64), [1.0, 1.0], atol=1e-9)


def test_zero_advantages_are_no_clip_side_and_empty_rows_leave_the_ratio_mean():
    # row 0: Δ = [1, 1], A = [0, 0.5]: both tokens differ from their clip, only the A > 0 one counts as high;
    # log-mean (0 + 0.4)/2 = 0.2. Row 1 has no valid token and stays out of ratio_mean.
    logp, batch = ratio_batch([[math.e, math.e], [1.0, 1.0]], [[0.0, 0.5], [1.0, 1.0]], mask=[[1, 1], [0, 0]])
    out = GMPO()(logp, batch)
    close(out.metrics["clip_frac_high"], 0.5)
    close(out.metrics["clip_frac_low"], 0.0)
    close(out.metrics["ratio_mean"], math.exp(0.2))
