"""Algorithm-zoo components: registered and documented, valid defaults, declared inputs, and robust losses."""
import pytest
import torch

import polo.core.credit  # noqa: F401  (registers)
import polo.core.divergences  # noqa: F401
import polo.core.losses  # noqa: F401
import polo.core.shaping  # noqa: F401
from polo.core.registry import CREDIT, DIVERGENCES, POLICY_LOSSES, SHAPING

from .helpers import build_batch

LOSSES = ["info_adaptive_clip", "r2vpo", "drpo", "ctpo_cumulative", "ess_adaptive", "sapo", "clip_cov", "kl_cov",
          "gmpo", "gpg", "dro"]
NEEDS = {
    (POLICY_LOSSES, "info_adaptive_clip"): {"old_logp", "entropy_old"},
    (POLICY_LOSSES, "drpo"): {"old_logp", "correct"},
    (POLICY_LOSSES, "gpg"): set(),
    (CREDIT, "rollout_is"): {"old_logp", "rollout_logp"},
    (CREDIT, "dgpo_hellinger"): {"old_dist", "ref_dist"},
    (CREDIT, "top_entropy_quantile"): {"entropy_old"},
    (DIVERGENCES, "hellinger"): {"ref_logp"},
    (SHAPING, "overlong"): set(),
}
ARXIV = {"info_adaptive_clip": None, "r2vpo": "2601.03320", "dgpo_hellinger": "2605.03327", "drpo": "2510.04474",
         "ctpo_cumulative": "2605.07331", "ess_adaptive": "2605.12380", "overlong": "2503.14476",
         "sapo": "2511.20347", "clip_cov": "2505.22617", "kl_cov": "2505.22617", "gmpo": "2507.20673",
         "gpg": "2504.02546", "dro": "2405.19107", "top_entropy_quantile": "2506.01939", "rollout_is": None}
ALL = [(POLICY_LOSSES, n) for n in LOSSES] + [(CREDIT, n) for n in ("rollout_is", "dgpo_hellinger",
                                                                    "top_entropy_quantile")] + [(SHAPING, "overlong")]


@pytest.mark.parametrize("registry, name", ALL, ids=[n for _, n in ALL])
def test_registered_documented_and_buildable(registry, name):
    cls = registry.get(name)
    assert cls.__doc__ and cls.provenance in {"CODE", "PAPER", "SECONDARY", "RECONSTRUCTED"}
    arxiv = ARXIV[name]
    assert cls.paper.endswith(f"(arXiv:{arxiv})" if arxiv else "arXiv id not found)"), cls.paper
    component = registry.build(name)
    assert component.needs() == NEEDS.get((registry, name), {"old_logp"})


def hard_batch(dtype):
    """Groups [0,0,1,2] (two singletons), row 3 fully masked, ratios e^{±50} clamped, zero advantages on row 2."""
    B, T = 4, 3
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 0, 0], [0, 0, 0]])
    old = torch.full((B, T), -1.0, dtype=dtype)
    logp = (old + torch.tensor([50.0, -50.0, 0.0], dtype=dtype)).requires_grad_(True)
    adv = torch.tensor([[1.0] * T, [-1.0] * T, [0.0] * T, [5.0] * T], dtype=dtype) * mask
    batch = build_batch([1.0, 0.0, 1.0, 0.0], group=[0, 0, 1, 2], mask=mask, old_logp=old, advantages=adv)
    batch.extras.update(entropy_old=torch.rand(B, T, dtype=dtype), correct=torch.tensor([1.0, 0.0, 1.0, 0.0]))
    return logp, batch


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", LOSSES)
def test_losses_finite_with_extreme_ratios_masked_rows_and_singletons(name, dtype):
    logp, batch = hard_batch(dtype)
    out = POLICY_LOSSES.build(name)(logp, batch)
    mask = batch.mask
    loss = out.loss if out.loss is not None else (out.token_loss * mask).sum() / mask.sum()
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(out.token_loss * mask).all()
    assert torch.isfinite(logp.grad).all() and (logp.grad[mask == 0] == 0).all()
    assert all(torch.isfinite(torch.as_tensor(v)).all() for v in out.metrics.values())


@pytest.mark.parametrize("name", LOSSES)
def test_zero_advantages_and_fresh_data_give_no_policy_gradient(name):
    """All-equal rewards: zero advantages and ratio 1 leave nothing to learn (DRPO: no correct answers)."""
    logp, batch = hard_batch(torch.float64)
    batch.old_logp = logp.detach().clone()
    batch.advantages = torch.zeros_like(batch.mask)
    batch.extras["correct"] = torch.zeros(4)
    out = POLICY_LOSSES.build(name)(logp, batch)
    (out.loss if out.loss is not None else (out.token_loss * batch.mask).sum()).backward()
    assert (logp.grad.abs() < 1e-12).all()
