import math

import torch

from polo.core.losses.cov import ClipCov, KLCov, centered_covariance

from .helpers import close
from .zoo_helpers import ratio_batch

ADV = [3.0, -1.0, -1.0, -1.0]
LOGP = [-0.5, -2.0, -2.0, -1.5]  # cov = (A − 0)·(logp + 1.5) = [3, 0.5, 0.5, 0]


def test_covariance():
    close(centered_covariance(torch.tensor([ADV]), torch.tensor([LOGP]), torch.ones(1, 4))[0], [3.0, 0.5, 0.5, 0.0])


def test_clip_cov_detaches_the_high_covariance_token():
    logp, batch = ratio_batch([1.0, 1.1, 0.9, 1.0], ADV, logp=LOGP)
    out = ClipCov()(logp, batch)
    out.token_loss.sum().backward()
    close(out.token_loss[0].detach(), [0.0, 1.1, 0.9, 1.0])
    close(logp.grad[0], [0.0, 1.1, 0.9, 1.0])
    close(out.metrics["cov_drop_frac"], 0.25)


def test_clip_cov_leaves_clipped_and_out_of_band_tokens_alone():
    logp, batch = ratio_batch([1.5, 1.0, 1.0, 1.0], ADV, logp=LOGP)
    out = ClipCov()(logp, batch)  # token 0 already clipped by PPO: not a candidate
    close(out.token_loss[0].detach(), [-3.6, 1.0, 1.0, 1.0])
    logp, batch = ratio_batch([1.0] * 4, ADV, logp=LOGP)
    close(ClipCov(cov_ub=2.0)(logp, batch).token_loss[0].detach(), [-3.0, 1.0, 1.0, 1.0])


def test_kl_cov_penalizes_the_top_covariance_token():
    logp, batch = ratio_batch([math.exp(0.1), 1.2, 0.8, 1.0], ADV, logp=LOGP)
    out = KLCov()(logp, batch)
    out.token_loss.sum().backward()
    close(out.token_loss[0].detach(), [-3 * math.exp(0.1) + 0.1, 1.2, 0.8, 1.0])  # no clipping elsewhere
    close(logp.grad[0], [-3 * math.exp(0.1) + 1.0, 1.2, 0.8, 1.0])
    close(out.metrics["kl_cov_frac"], 0.25)


def test_top_covariance_selection_depends_on_the_micro_batch():
    # two rows of 4 tokens: k = max(⌊2e-4·N⌋, 1) = 1 token per loss call, and the covariance is centered on the
    # call's own means, so splitting the minibatch into two micro-batches penalizes two tokens instead of one
    logp, batch = ratio_batch([[1.0] * 4, [1.0] * 4], [ADV, [1.0, -1.0, 2.0, 0.0]],
                              logp=[LOGP, [-1.0, -3.0, -0.2, -1.0]])
    whole = KLCov()(logp, batch).metrics["kl_cov_frac"] * 8
    halves = [KLCov()(logp[[i]], batch.select(torch.tensor([i]))).metrics["kl_cov_frac"] * 4 for i in (0, 1)]
    close(whole, 1.0)
    close(sum(halves), 2.0)


# ---- mutation-testing kills (docs/mutation.md)
def test_covariance_centres_an_advantage_with_nonzero_mean():
    # A = [2, 0], mean 1; logp = [−1, −3], mean −2: cov = [(2 − 1)(−1 + 2), (0 − 1)(−3 + 2)] = [1, 1]
    close(centered_covariance(torch.tensor([[2.0, 0.0]]), torch.tensor([[-1.0, -3.0]]), torch.ones(1, 2))[0], [1.0, 1.0])


def test_clip_cov_band_is_open_and_k_is_a_fraction_of_the_tokens():
    # ratios 1: no token clipped; cov = [3, 0.5, 0.5, 0] (exact in float64)
    logp, batch = ratio_batch([1.0] * 4, ADV, logp=LOGP)
    assert ClipCov(cov_lb=3.0)(logp, batch).metrics["cov_drop_frac"] == 0.0  # cov = lb is outside (lb, ub)
    assert ClipCov(cov_ub=3.0)(logp, batch).metrics["cov_drop_frac"] == 0.0  # cov = ub is outside too
    # band (0.4, 5) holds 3 tokens: k = max(⌊0.5·4⌋, 1) = 2 drop; the default ratio gives max(⌊8e-4⌋, 1) = 1
    assert ClipCov(cov_lb=0.4, clip_cov_ratio=0.5)(logp, batch).metrics["cov_drop_frac"] == 0.5
    assert ClipCov(cov_lb=0.4)(logp, batch).metrics["cov_drop_frac"] == 0.25


def test_kl_cov_k_is_a_fraction_of_the_tokens_and_ratio_mean():
    logp, batch = ratio_batch([1.0, 1.2, 0.8, 1.0], ADV, logp=LOGP)
    out = KLCov(kl_cov_ratio=0.5)(logp, batch)  # k = ⌊0.5·4⌋ = 2 tokens
    close(out.metrics["kl_cov_frac"], 0.5)
    close(out.metrics["ratio_mean"], 1.0)  # (1 + 1.2 + 0.8 + 1)/4
