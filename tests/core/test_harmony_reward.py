"""HarmonyGuard's dual-objective step reward (polo.methods.harmony_guard.reward)."""
import pytest
import torch

from polo.methods.harmony_guard.reward import dual_objective_rewards


def test_spec_example():
    r = dual_objective_rewards(torch.tensor([0, 0, 1, 0]), torch.tensor([1, 0, 1, 1]),
                               torch.tensor([0.0, 0.0, 0.0, 1.0]), mu=0.1, lam=1.0)
    assert r.tolist() == pytest.approx([0.1, 0.0, -0.9, 1.1], abs=1e-4)
    assert float(r.sum()) == pytest.approx(0.3, abs=1e-4)


def test_zero_weights_leave_the_outcome_and_a_single_step_works():
    flags = torch.tensor([1.0])
    assert dual_objective_rewards(flags, flags, torch.tensor([0.5]), mu=0.0, lam=0.0).tolist() == [0.5]
    assert dual_objective_rewards(flags, flags, torch.tensor([1.0]), mu=0.2, lam=0.5).tolist() == pytest.approx([0.7])


def test_bool_flags_and_empty_input():
    r = dual_objective_rewards(torch.tensor([True, False]), torch.tensor([False, True]), torch.zeros(2))
    assert r.tolist() == pytest.approx([-1.0, 0.1])
    assert dual_objective_rewards(torch.zeros(0), torch.zeros(0), torch.zeros(0)).numel() == 0


@pytest.mark.parametrize("risky, aligned, outcome, match", [
    ([0.5], [1.0], [0.0], "risky must hold 0/1"),
    ([0.0], [float("nan")], [0.0], "aligned must hold 0/1"),
    ([0.0], [1.0], [float("nan")], "NaN"),
    ([0.0, 1.0], [1.0], [0.0], "one shape"),
])
def test_bad_inputs_raise(risky, aligned, outcome, match):
    with pytest.raises(ValueError, match=match):
        dual_objective_rewards(torch.tensor(risky), torch.tensor(aligned), torch.tensor(outcome))


def test_negative_weights_raise():
    with pytest.raises(ValueError, match="mu=-0.1"):
        dual_objective_rewards(torch.zeros(1), torch.zeros(1), torch.zeros(1), mu=-0.1)
