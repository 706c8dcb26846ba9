import pytest
import torch

from polo.core.advantages.redippo import ReDiPPO
from polo.core.credit.critic_discrepancy import CriticDiscrepancy, discrepancy_weights
from polo.core.registry import ADVANTAGES, CREDIT, ConfigError

from .helpers import build_batch, close

V_REF = [[0.6, 0.8, 0.9], [0.4, 0.2, 0.1]]
V_STD = [[0.5, 0.5, 0.6], [0.5, 0.6, 0.5]]


def critic_batch(rewards=(1.0, 0.0), v_ref=V_REF, v_std=V_STD, mask=None):
    batch = build_batch(list(rewards), mask=mask or [[1] * len(v_ref[0])] * len(v_ref), values=v_std)
    batch.extras["values_privileged"] = torch.tensor(v_ref, dtype=torch.float64)
    return batch


def test_worked_example():
    batch = critic_batch()
    close(ReDiPPO(reweight=False, whiten=False)(batch).advantages, [[0.4, 0.2, 0.1], [-0.4, -0.2, -0.1]])
    w = CriticDiscrepancy()(batch)
    close(w, [[0.5000, 1.2673, 1.2673], [0.5000, 2.0000, 2.0000]])
    close(ReDiPPO(whiten=False)(batch).advantages, [[0.2000, 0.2535, 0.1267], [-0.2000, -0.4000, -0.2000]])
    out = ReDiPPO()(batch)
    close(out.advantages, [[0.8916, 1.0929, 0.6155], [-0.6155, -1.3690, -0.6155]])
    close(out.returns, [[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]])  # both critics regress G


def test_registered_with_needs_and_bounds():
    assert ADVANTAGES.build("redippo").needs() == {"values", "values_privileged"}
    assert CREDIT.build("critic_discrepancy").needs() == {"values", "values_privileged"}
    with pytest.raises(ConfigError, match="w_min"):
        CREDIT.build({"name": "critic_discrepancy", "w_min": 1.5})


def test_masked_tokens_do_not_enter_statistics():
    holed = critic_batch(v_ref=[[0.6, 5.0, 0.8, 0.9], V_REF[1] + [0.0]], v_std=[[0.5, -5.0, 0.5, 0.6], V_STD[1] + [0.0]],
                         mask=[[1, 0, 1, 1], [1, 1, 1, 0]])
    out = ReDiPPO()(holed).advantages
    close(out[:, [0, 2, 3]][0], [0.8916, 1.0929, 0.6155])
    close(out[1, :3], [-0.6155, -1.3690, -0.6155])
    assert out[0, 1] == 0 and out[1, 3] == 0


def test_equal_critics_give_unit_weights_and_fully_masked_rows_are_finite():
    w = discrepancy_weights(torch.ones(2, 3), torch.ones(2, 3), torch.ones(2, 3), 0.5, 2.0, 1e-6)
    close(w, torch.ones(2, 3))
    batch = critic_batch(rewards=(1.0, 0.0, 1.0), v_ref=V_REF + [[0.3] * 3], v_std=V_STD + [[0.9] * 3],
                         mask=[[1, 1, 1], [1, 1, 1], [0, 0, 0]])
    out = ReDiPPO()(batch)
    assert torch.isfinite(out.advantages).all() and (out.advantages[2] == 0).all() and (out.returns[2] == 0).all()


# ---- mutation-testing kills (docs/mutation.md)
def test_the_trainers_kl_coef_reaches_the_token_rewards():
    batch = critic_batch()
    batch.old_logp = torch.full((2, 3), -1.0, dtype=torch.float64)
    batch.ref_logp = torch.full((2, 3), -1.5, dtype=torch.float64)  # a KL to the reference on every token
    passed = ReDiPPO(reweight=False, whiten=False)(batch, kl_coef=0.5).advantages
    close(passed, ReDiPPO(reweight=False, whiten=False, kl_coef=0.5)(batch).advantages)
    assert (passed - ReDiPPO(reweight=False, whiten=False)(batch).advantages).abs().max() > 0.1


def test_weight_metrics_of_the_worked_example():
    # w on the valid tokens = [0.5, 1.2673, 1.2673, 0.5, 2, 2] (test_worked_example); mean 1.25577,
    # population variance (0.75577² + 0.01153² + 0.74423²)/3 = 0.37507 → std 0.61243 (unbiased would be 0.6709);
    # 0.5 = w_min and 2 = w_max count as clamped, both included: 4/6
    out = ReDiPPO()(critic_batch())
    assert out.diagnostics["redippo/weight_std"] == pytest.approx(0.61243, abs=1e-4)
    assert out.diagnostics["redippo/weight_clamped_frac"] == pytest.approx(4 / 6)


def test_no_valid_token_gives_zero_weight_metrics_and_no_reweighting_gives_no_metrics():
    batch = critic_batch(mask=[[0, 0, 0], [0, 0, 0]])
    out = ReDiPPO(whiten=False)(batch)
    assert out.diagnostics == {"redippo/weight_std": 0.0, "redippo/weight_clamped_frac": 0.0}
    assert (out.advantages == 0).all()
    assert ReDiPPO(reweight=False)(critic_batch()).diagnostics == {}
