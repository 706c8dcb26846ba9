"""Information-consistent GRPO's reward (arXiv:2512.12858): word entropy, helpfulness H~, stability F, r, A."""
import math

import pytest
import torch
from pydantic import ValidationError

from polo.core.advantages.group import GRPO
from polo.core.batch import RolloutBatch
from polo.methods.info_consistency.shaping import InfoConsistency, helpfulness_stability
from polo.engines.base import Rollouts
from polo.methods.info_consistency.word_entropy import completion_word_entropy, word_entropy

RESPONSES = ["invest in a diversified low cost index fund", "invest in index funds",
             "a diversified low cost index fund with bonds for safety"]


def batch_of(entropy, group):
    B = len(group)
    return RolloutBatch(prompt_ids=torch.ones(B, 2, dtype=torch.long), prompt_mask=torch.ones(B, 2),
                        response_ids=torch.ones(B, 3, dtype=torch.long), response_mask=torch.ones(B, 3),
                        group=torch.tensor(group), rewards=torch.zeros(B, 1), old_logp=torch.zeros(B, 3),
                        extras={} if entropy is None else {"word_entropy": torch.tensor(entropy)})


def test_worked_example():
    H = torch.tensor([word_entropy(r) for r in RESPONSES])
    torch.testing.assert_close(H, torch.tensor([2.0794, 1.3863, 2.3026]), atol=1e-4, rtol=0)
    helpful, stable = helpfulness_stability(H.double(), torch.zeros(3, dtype=torch.long))
    torch.testing.assert_close(helpful.float(), torch.tensor([0.7565, 0.0, 1.0]), atol=1e-4, rtol=0)
    torch.testing.assert_close(stable.float(), torch.tensor([0.5000, 0.1218, 0.3782]), atol=1e-4, rtol=0)
    batch = batch_of(H.tolist(), [0, 0, 0])
    r = InfoConsistency(alpha=0.5, beta=0.5)(batch, 8)
    torch.testing.assert_close(r, torch.tensor([0.6282, 0.0609, 0.6891]), atol=1e-4, rtol=0)
    A = GRPO(scale_by_std=True, eps=1e-6).sequence_advantage(r, batch.group)
    torch.testing.assert_close(A, torch.tensor([0.4873, -1.1502, 0.6630]), atol=1e-4, rtol=0)


def test_groups_are_independent_and_ids_may_interleave():
    H = [2.0794, 0.3, 1.3863, 0.9, 2.3026]
    helpful, stable = helpfulness_stability(torch.tensor(H, dtype=torch.float64), torch.tensor([7, 2, 7, 2, 7]))
    torch.testing.assert_close(helpful[[0, 2, 4]].float(), torch.tensor([0.7565, 0.0, 1.0]), atol=1e-4, rtol=0)
    torch.testing.assert_close(stable[[0, 2, 4]].float(), torch.tensor([0.5, 0.1218, 0.3782]), atol=1e-4, rtol=0)
    torch.testing.assert_close(helpful[[1, 3]].float(), torch.tensor([0.0, 1.0]), atol=1e-6, rtol=0)
    torch.testing.assert_close(stable[[1, 3]].float(), torch.tensor([0.0, 0.0]), atol=1e-6, rtol=0)  # K=2: gap = MAX_GAP


def test_single_response_and_equal_entropies_give_no_helpfulness_and_full_stability():
    helpful, stable = helpfulness_stability(torch.tensor([1.5, 0.7, 0.7, 0.7], dtype=torch.float64),
                                            torch.tensor([0, 1, 1, 1]))
    assert helpful.tolist() == [0.0, 0.0, 0.0, 0.0] and stable.tolist() == [1.0, 1.0, 1.0, 1.0]
    r = InfoConsistency(alpha=0.3, beta=0.6)(batch_of([1.5, 0.7, 0.7, 0.7], [0, 1, 1, 1]), 8)
    torch.testing.assert_close(r, torch.full((4,), 0.6))


def test_empty_and_single_word_responses_have_zero_entropy():
    assert word_entropy("") == 0.0 and word_entropy("  \n ") == 0.0 and word_entropy("Yes yes YES") == 0.0
    assert word_entropy("a b") == pytest.approx(math.log(2))
    B = 3
    batch = batch_of(None, [0, 0, 0])
    got = completion_word_entropy(None, Rollouts(batch, ["", "x y", "x\nx"], [None] * B))
    torch.testing.assert_close(got["word_entropy"], torch.tensor([0.0, math.log(2), 0.0]))


def test_non_finite_entropy_and_a_missing_input_are_refused():
    with pytest.raises(ValueError, match="finite"):
        helpfulness_stability(torch.tensor([1.0, float("nan")]), torch.tensor([0, 0]))
    with pytest.raises(ValueError, match="word_entropy"):
        InfoConsistency()(batch_of(None, [0, 0]), 8)
    with pytest.raises(ValueError, match="word_entropy"):
        InfoConsistency()(batch_of([1.0, 2.0, 3.0], [0, 0]), 8)


def test_settings_and_declared_input():
    assert InfoConsistency(alpha=0.2, beta=0.5).max_value == pytest.approx(0.7)
    assert InfoConsistency().needs() == {"word_entropy"}
    with pytest.raises(ValidationError, match="alpha"):
        InfoConsistency(alpha=-1.0)
