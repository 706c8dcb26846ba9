import math

import torch

from polo.core.losses.ess_adaptive import ESSAdaptive, effective_sample_size

from .helpers import close
from .zoo_helpers import ratio_batch, token_mean_backward

LOGP = [[-1.0, -0.5, -2.0], [-0.3, -1.2, -0.7]]
OLD = torch.tensor([[-1.1, -0.5, -1.5], [-0.3, -1.0, -0.9]], dtype=torch.float64)


def test_worked_example():
    logp, batch = ratio_batch((torch.tensor(LOGP, dtype=torch.float64) - OLD).exp(), [[1.0] * 3, [-1.0] * 3],
                              logp=LOGP)
    out = ESSAdaptive()(logp, batch)
    close(out.metrics["ess"], 0.9587)
    loss, grad = token_mean_backward(out, logp, batch)
    close(loss, 0.1197)
    close(grad, [[-0.1591, -0.1598, -0.1056], [0.1598, 0.1349, 0.1610]])
    kl_term = (1 - out.metrics["ess"]) * ((torch.tensor(LOGP) - OLD) + torch.expm1(OLD - torch.tensor(LOGP))).sum() / 6
    close(kl_term, 0.0013)


def test_fresh_data_is_plain_reinforce():
    logp, batch = ratio_batch([1.0, 1.0], [2.0, -1.0], logp=[-0.5, -2.0])
    out = ESSAdaptive()(logp, batch)
    close(out.metrics["ess"], 1.0)
    close(out.token_loss[0].detach(), [1.0, -2.0])


def test_ess_is_one_without_valid_tokens():
    assert effective_sample_size(torch.tensor([[5.0]]), torch.zeros(1, 1)) == 1.0
    close(effective_sample_size(torch.tensor([[1.0, 3.0]], dtype=torch.float64), torch.ones(1, 2)), 16 / 20)


# ---- mutation-testing kills (docs/mutation.md)
def test_one_token_has_ess_one_and_the_worked_examples_ratio_metrics():
    close(effective_sample_size(torch.tensor([[2.0]], dtype=torch.float64), torch.ones(1, 1)), 1.0)  # r²/(r²·1)
    logp, batch = ratio_batch((torch.tensor(LOGP, dtype=torch.float64) - OLD).exp(), [[1.0] * 3, [-1.0] * 3],
                              logp=LOGP)
    out = ESSAdaptive()(logp, batch)
    # r = exp([0.1, 0, −0.5 | 0, −0.2, 0.2]) = [1.1052, 1, 0.6065 | 1, 0.8187, 1.2214]: mean 0.9586; 4 of 6 above ESS
    close(out.metrics["ratio_mean"], 0.9586)
    close(out.metrics["clip_frac"], 4 / 6)


def test_the_eps_of_the_denominator_matters_for_tiny_ratios_and_ess_keeps_the_dtype():
    # one token, r = 1e-4: r² / ((r² + 1e-8)·1) = 1e-8 / 2e-8 = 0.5
    close(effective_sample_size(torch.tensor([[1e-4]], dtype=torch.float64), torch.ones(1, 1)), 0.5)
    empty = effective_sample_size(torch.tensor([[5.0]], dtype=torch.float64), torch.zeros(1, 1))
    assert empty.item() == 1.0 and empty.dtype == torch.float64


def test_kl_exponent_is_clamped_to_ten():
    # A = 0 so u = (1 − ESS)·KL; Δ = [15, −15, 0]: KL = Δ + expm1(clamp(−Δ, −10, 10)) = [15 + expm1(−10),
    # −15 + expm1(10), 0]; ESS = (Σr)² / ((Σr² + 1e-8)·3) with r = e^Δ
    d = [15.0, -15.0, 0.0]
    r = [math.exp(x) for x in d]
    ess = sum(r) ** 2 / ((sum(x * x for x in r) + 1e-8) * 3)
    logp, batch = ratio_batch(r, [0.0] * 3)
    out = ESSAdaptive()(logp, batch)
    kl = [15 + math.expm1(-10), -15 + math.expm1(10), 0.0]
    close(out.token_loss[0].detach(), [(1 - ess) * k for k in kl], atol=1e-7)


def test_a_nan_ratio_falls_back_to_ess_one_and_a_ratio_of_one_is_not_clipped():
    logp, batch = ratio_batch([1.0, 1.0], [1.0, 1.0], logp=[float("nan"), -1.0])
    out = ESSAdaptive()(logp, batch)
    assert out.metrics["ess"].item() == 1.0
    close(out.metrics["clip_frac"], 0.0)  # NaN > 1 and 1 > 1 are both false
