"""LambdaMix's advantage (λ-weighted per-objective group z-scores) and its preference draws."""
import pytest
import torch

from polo.methods.lambdamix.advantage import LambdaMixAdvantage
from polo.core.batch import RolloutBatch
from polo.methods.lambdamix.engine import draw_preferences
from polo.tasks.rewards import get_reward


def batch(rewards, lam, group=None, T=2):
    rewards = torch.tensor(rewards, dtype=torch.float32)
    B = len(rewards)
    return RolloutBatch(
        prompt_ids=torch.zeros(B, 1, dtype=torch.long), prompt_mask=torch.ones(B, 1, dtype=torch.long),
        response_ids=torch.zeros(B, T, dtype=torch.long), response_mask=torch.ones(B, T, dtype=torch.long),
        group=torch.zeros(B, dtype=torch.long) if group is None else torch.tensor(group),
        old_logp=torch.zeros(B, T), rewards=rewards, reward_names=("help", "harm")[: rewards.shape[1]],
        extras={"lam": torch.tensor(lam, dtype=torch.float32)})


def test_worked_example():
    """§14(e): λ = (0.7, 0.3); helpfulness [0.9, 0.5, 0.1], harmlessness [0.2, 0.8, 0.9]."""
    lam = [[0.7, 0.3]] * 3
    b = batch([[0.9, 0.2], [0.5, 0.8], [0.1, 0.9]], lam)
    est = LambdaMixAdvantage()
    z = est.components(b)
    assert torch.allclose(z[:, 0], torch.tensor([1.0, 0.0, -1.0]), atol=1e-4)
    assert torch.allclose(z[:, 1], torch.tensor([-1.1446, 0.4402, 0.7044]), atol=1e-4)
    out = est(b)
    assert torch.allclose(out.advantages, torch.tensor([0.3566, 0.1321, -0.4887])[:, None].expand(3, 2), atol=1e-4)
    # the equal-weight mix (-0.0723, 0.2201, -0.1478) ranks row 0 below average, λ above: 1 sign of 3 differs
    assert out.diagnostics == {"lambdamix/lambda_std": 0.0, "lambdamix/sign_vs_equal": pytest.approx(1 / 3)}


def test_rows_use_their_own_preference():
    """Two groups with the same rewards and opposite corners get opposite rankings."""
    rewards = [[1.0, 0.0], [0.0, 1.0]] * 2
    b = batch(rewards, [[1.0, 0.0]] * 2 + [[0.0, 1.0]] * 2, group=[0, 0, 1, 1], T=1)
    out = LambdaMixAdvantage()(b)
    adv = out.advantages[:, 0]
    assert adv[0] > 0 > adv[1] and adv[2] < 0 < adv[3]
    assert out.diagnostics["lambdamix/lambda_std"] == pytest.approx(0.5)  # corners (1, 0) and (0, 1), half each
    assert torch.allclose(adv, torch.tensor([0.7071, -0.7071, -0.7071, 0.7071]), atol=1e-4)


def test_edge_cases():
    est = LambdaMixAdvantage()
    equal = est(batch([[0.5, 0.5]] * 3, [[0.5, 0.5]] * 3)).advantages
    assert torch.equal(equal, torch.zeros_like(equal))  # all-equal group: no signal
    single = est(batch([[0.3, 0.9]], [[0.5, 0.5]])).advantages  # a lone row keeps GRPO's lone-sample rule
    assert torch.allclose(single, torch.full_like(single, 0.6))
    masked = batch([[0.9, 0.2], [0.1, 0.8]], [[0.5, 0.5]] * 2)
    masked.response_mask[0, 1] = 0
    assert est(masked).advantages[0, 1] == 0
    with pytest.raises(ValueError, match="NaN"):
        est(batch([[0.9, 0.2], [0.1, 0.8]], [[float("nan"), 0.5]] * 2))
    with pytest.raises(ValueError, match="one reward per objective"):
        est(batch([[0.9, 0.2], [0.1, 0.8]], [[0.3, 0.3, 0.4]] * 2))
    nan_reward = est(batch([[float("nan"), 0.2], [0.1, 0.8], [0.5, 0.5]], [[0.5, 0.5]] * 3)).advantages
    assert torch.isfinite(nan_reward).all()  # a missing reward counts 0 in its row (GDPO's rule)


def test_whitening_option():
    b = batch([[0.9, 0.2], [0.5, 0.8], [0.1, 0.9]], [[0.7, 0.3]] * 3)
    adv = LambdaMixAdvantage(whiten="sample")(b).advantages[:, 0]
    assert abs(float(adv.mean())) < 1e-5 and abs(float(adv.std()) - 1) < 1e-3


def test_preference_draws():
    g = torch.Generator().manual_seed(0)
    lam = draw_preferences(4000, 3, 0.2, g)
    assert lam.shape == (4000, 3) and torch.allclose(lam.sum(-1), torch.ones(4000)) and (lam >= 0).all()
    corner = (lam == 1).any(-1).float().mean()
    assert abs(float(corner) - 0.2) < 0.03  # one-hot corners with probability 0.2
    interior = lam[~(lam == 1).any(-1)]
    assert torch.allclose(interior.mean(0), torch.full((3,), 1 / 3), atol=0.02)  # Dirichlet(1): mean 1/M
    assert abs(float((interior[:, 0] < 0.5).float().mean()) - 0.75) < 0.03  # Beta(1, 2): P(λ_1 < 1/2) = 3/4
    again = draw_preferences(4000, 3, 0.2, torch.Generator().manual_seed(0))
    assert torch.equal(lam, again)  # the run's generator decides: resumable
    assert torch.equal(draw_preferences(5, 2, 1.0, g).max(-1).values, torch.ones(5))


def test_objectives_conflict():
    """The recipe's objectives on an answer's prefixes: char_match grows with the prefix, shortness falls (quadratically)."""
    prefixes = ["", "1", "12", "123", "1234"]
    char = get_reward("char_match")(prompts=[""] * 5, completions=prefixes, answer=["123"] * 5)
    shortness = get_reward("shortness")(prompts=[""] * 5, completions=prefixes, answer=["123"] * 5)
    assert char == pytest.approx([0, 1 / 3, 2 / 3, 1, 0.75])
    assert shortness == pytest.approx([1, 8 / 9, 5 / 9, 0, 0])
