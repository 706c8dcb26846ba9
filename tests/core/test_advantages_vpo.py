import math

import pytest
import torch

from polo.methods.vpo.advantage import VPO, sample_gamma, set_scores
from polo.core.registry import ConfigError

from .helpers import build_batch, close

nan = math.nan
W = [[1.0, 0.0], [0.5, 0.5], [0.0, 1.0]]
SETS = [[[1, 0], [0, 1]], [[1, 1], [0, 0]], [[0.5, 0.5], [0.5, 0]]]  # rollouts A, B, C with m = 2 answers


def vpo_batch(vectors, group=None, mask=None, name="answer_rewards"):
    vectors = torch.as_tensor(vectors, dtype=torch.float64)
    batch = build_batch([0.0] * len(vectors), group, mask=mask)
    batch.extras[name] = vectors
    return batch


def test_worked_example():
    vectors = torch.tensor(SETS, dtype=torch.float64)
    score, best, choice = set_scores(vectors, torch.tensor(W, dtype=torch.float64).expand(3, -1, -1))
    close(score, [0.8333, 1.0, 0.5])
    close(best[0], [1.0, 0.5, 1.0])  # A: best of its set per weight
    # A's best answer changes with the weights (the tie at [0.5, 0.5] goes to the first); B's [1, 1] dominates;
    # C's [0.5, 0.5] is at least as good as [0.5, 0] under every weight
    assert choice.tolist() == [[0, 0, 1], [0, 0, 0], [0, 0, 0]]
    out = VPO(weights=W)(vpo_batch(SETS))
    close(out.advantages[:, 0], [0.2673, 1.0690, -1.3363])
    assert out.diagnostics["vpo/set_score"] == pytest.approx(0.7778, abs=1e-4)  # the group mean
    assert out.diagnostics["vpo/group_std"] == pytest.approx(0.2079, abs=1e-4)  # population std
    assert out.diagnostics["vpo/pool_best"] == pytest.approx(1.0, abs=1e-4)
    assert out.diagnostics["vpo/scalarization_disagreement"] == pytest.approx(1 / 9)  # A's third draw of 9 pairs
    # the contrast: the summed reward of each set's best answer ties A and C (1, 2, 1); VPO separates them
    assert vectors.sum(-1).amax(-1).tolist() == [1.0, 2.0, 1.0]


def test_missing_answers_and_empty_sets():
    sets = [[[1, 0], [nan, nan]], [[nan, nan], [nan, nan]], [[0, 1], [nan, 0.5]]]  # 1, 0 and 2 parsed answers
    weights = torch.tensor(W, dtype=torch.float64).expand(3, -1, -1)
    score, _, _ = set_scores(torch.tensor(sets, dtype=torch.float64), weights)
    # A: one answer [1, 0]; B: no answer, score 0 (kept in the group); C: [0, 1] and [0, 0.5] (NaN counts 0)
    close(score, [0.5, 0.0, 0.5])
    out = VPO(weights=W)(vpo_batch(sets))
    mean, std = 1 / 3, math.sqrt(((0.5 - 1 / 3) ** 2 * 2 + (1 / 3) ** 2) / 3)
    close(out.advantages[:, 0], [(0.5 - mean) / (std + 1e-6), -mean / (std + 1e-6), (0.5 - mean) / (std + 1e-6)])


def test_single_answer_is_the_mean_linear_scalarization():
    vectors = torch.tensor([[[0.2, 0.9]], [[0.7, 0.1]], [[0.4, 0.4]]], dtype=torch.float64)
    weights = torch.tensor(W, dtype=torch.float64)
    score, _, _ = set_scores(vectors, weights.expand(3, -1, -1))
    close(score, vectors[:, 0] @ weights.mean(0))
    assert VPO(weights=W)(vpo_batch(vectors)).diagnostics["vpo/scalarization_disagreement"] == 0.0  # sets of one


def test_degenerate_groups_give_zero():
    same = [[[0.5, 0.5]], [[0.5, 0.5]], [[0.3, 0.7]], [[0.9, 0.1]]]  # group 0 all equal, group 1 a single row
    out = VPO(weights=W)(vpo_batch(same, group=[0, 0, 1, 2]))
    assert out.advantages[:, 0].tolist() == [0.0, 0.0, 0.0, 0.0]
    close(VPO(weights=W, eps=1.0)(vpo_batch(SETS)).advantages[:, 0], [0.0, 0.0, 0.0])  # sigma < eps: A = 0


def test_groups_are_independent_and_interleaved_ids_work():
    sets = SETS + [[[0, 1], [0, 0]], [[1, 0], [0, 0]], [[0.2, 0.2], [0.9, 0.9]]]
    group = [7, 3, 7, 3, 7, 3]
    out = VPO(weights=W)(vpo_batch([sets[i] for i in (0, 3, 1, 4, 2, 5)], group=group))
    alone = VPO(weights=W)(vpo_batch(sets[3:])).advantages[:, 0]
    close(out.advantages[[0, 2, 4], 0], [0.2673, 1.0690, -1.3363])
    close(out.advantages[[1, 3, 5], 0], alone)


def test_tests_vector_lives_on_the_tests_the_group_ran():
    results = [[1, 0, nan], [0, 1, nan], [1, 1, nan]]
    est = VPO(vector="tests", weights=[[0.5, 0.25, 0.25], [0.0, 0.5, 0.5]])
    assert est.needs() == {"test_results"} and VPO().needs() == {"answer_rewards"}
    out = est(vpo_batch(results, name="test_results"))
    # the third test is absent: the rows renormalize to [2/3, 1/3] and [0, 1]
    reduced = VPO(vector="tests", weights=[[2 / 3, 1 / 3], [0.0, 1.0]])(
        vpo_batch([r[:2] for r in results], name="test_results"))
    close(out.advantages, reduced.advantages)
    no_tests = est(vpo_batch([[nan] * 3, [1, 0, 1]], name="test_results"))
    assert torch.isfinite(no_tests.advantages).all()


def test_draws_are_seeded_and_checkpointed():
    batch = vpo_batch([[[1, 0, 0.2]], [[0, 1, 0.3]], [[0.4, 0.5, 0.9]], [[0, 0, 1]]], group=[0, 0, 1, 1])
    a, b = VPO(seed=3), VPO(seed=3)
    first = a(batch).advantages
    close(first, b(batch).advantages, atol=0)
    state = a.state_dict()
    second = a(batch).advantages
    b.load_state_dict(state)
    close(second, b(batch).advantages, atol=0)
    assert not torch.equal(first, second)  # fresh draws each step
    assert not torch.equal(first, VPO(seed=4)(batch).advantages)


@pytest.mark.parametrize("alpha", [0.5, 1.0, 3.0])
def test_dirichlet_draws_have_the_dirichlet_moments(alpha):
    D, n = 3, 30000
    gamma = sample_gamma(alpha, n * D, torch.Generator().manual_seed(0)).view(n, D)
    w = gamma / gamma.sum(-1, keepdim=True)
    assert (gamma > 0).all()
    # Gamma(alpha, 1) has mean and variance alpha; seed 0 lands within 1.3 % of every moment checked here
    assert gamma.mean() == pytest.approx(alpha, rel=0.05) and gamma.var() == pytest.approx(alpha, rel=0.05)
    close(w.mean(0), [1 / D] * D, atol=0.005)
    var = (1 / D) * (1 - 1 / D) / (D * alpha + 1)
    close(w.var(0), [var] * D, atol=0.05 * var)


def test_masked_tokens_and_bad_inputs():
    out = VPO(weights=W)(vpo_batch(SETS, mask=[[1, 1, 0], [1, 0, 0], [0, 0, 0]]))
    assert out.advantages[0, 2] == 0 and out.advantages[1, 1:].eq(0).all() and out.advantages[2].eq(0).all()
    assert out.advantages[0, 0] == out.advantages[0, 1]
    with pytest.raises(ValueError, match="needs the input 'answer_rewards'"):
        VPO()(build_batch([0.0, 1.0]))
    with pytest.raises(ValueError, match=r"answer_rewards must have 3 dims"):
        VPO()(vpo_batch([[1.0, 0.0], [0.0, 1.0]]))
    with pytest.raises(ConfigError, match="rows have 2 entries, the reward vectors 3"):
        VPO(weights=W)(vpo_batch([[[1, 0, 0]], [[0, 1, 0]]]))
    with pytest.raises(ValueError, match="non-negative"):
        VPO(weights=[[1.0, -0.5]])
    with pytest.raises(ValueError, match="K rows of D numbers"):
        VPO(weights=[[1.0, 0.0], [1.0]])
