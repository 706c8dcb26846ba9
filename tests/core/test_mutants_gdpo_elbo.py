"""GDPO's ELBO loss: cases written to kill surviving mutants (docs/mutation.md)."""
import math

import torch

from polo.core.registry import POLICY_LOSSES

from .helpers import build_batch, close


def test_kl_exponent_is_capped_at_twenty():
    # one token, r = 1, A = 0: u = β·kl with d = Ê_ref − Ê_θ = 20.5 capped in the exponent: e^20 − 20.5 − 1
    batch = build_batch([0.0], mask=torch.ones(1, 1), old_logp=[[0.0]], ref_logp=[[20.5]], advantages=[[0.0]])
    out = POLICY_LOSSES.build({"name": "gdpo_elbo", "beta": 0.1})(torch.zeros(1, 1, dtype=torch.float64), batch)
    close(out.token_loss[0, 0] / (0.1 * (math.exp(20) - 21.5)), 1.0, atol=1e-9)
