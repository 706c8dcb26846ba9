"""RAPO (arXiv:2509.21871): the absolute and relative rewards, their inputs, the format reward, and the
worked example through TRL's GRPO advantage (eps 1e-4)."""
import math

import pytest
import torch

from polo.core.advantages.group import GRPO
from polo.core.registry import SHAPING, ConfigError
from polo.methods.rapo.shaping import absolute_reward, rank_reward
from polo.engines.base import Rollouts
from polo.inputs.base import PROVIDERS, ProviderContext
from polo.tasks import get_reward
from polo.tasks.base import Example

from tests.core.helpers import build_batch, close

S = [0.8, 0.5, 0.2]
O = [[0.75, 0.85, 0.70], [0.55, 0.40, 0.50], [0.30, 0.25, 0.60]]
R_RANK = [[0.9902, 0.9981, 0.9800], [0.9406, 0.8658, 0.9224], [0.9497, 0.9669, 0.7126]]
R_ABS = [[0.8825, 0.8825, 0.6065], [0.8825, 0.6065, 1.0000], [0.6065, 0.8825, 0.0003]]
R = [[1.8727, 1.8806, 1.5866], [1.8231, 1.4723, 1.9225], [1.5563, 1.8494, 0.7129]]
A = [[0.5531, 0.6006, -1.1537], [0.3542, -1.1285, 0.7742], [0.3108, 0.8075, -1.1183]]


def example_batch():
    o = torch.tensor(O, dtype=torch.float64).flatten()
    s = torch.tensor(S, dtype=torch.float64).repeat_interleave(3)
    batch = build_batch([[0.0]] * 9, group=torch.arange(3).repeat_interleave(3))
    batch.extras.update(predicted_score=o, true_score=s)
    return batch


def test_worked_example():
    batch = example_batch()
    rank, absolute = SHAPING.build("rapo_rank"), SHAPING.build({"name": "rapo_abs", "sigma": 0.1})
    assert rank.needs() == absolute.needs() == {"predicted_score", "true_score"}
    r_rank, r_abs = rank(batch, 8), absolute(batch, 8)
    close(r_rank.view(3, 3), R_RANK)
    close(r_abs.view(3, 3), R_ABS)
    r = r_rank + r_abs
    close(r.view(3, 3), R)
    close(GRPO(eps=1e-4).sequence_advantage(r, batch.group).view(3, 3), A)


def test_row_order_and_group_ids_do_not_matter():
    batch = example_batch()
    perm = torch.randperm(9, generator=torch.Generator().manual_seed(0))
    o, s, g = batch.extras["predicted_score"][perm], batch.extras["true_score"][perm], (batch.group[perm] + 1) * 7
    close(rank_reward(o, s, g), torch.tensor(R_RANK).flatten()[perm])


def test_unparseable_predictions_score_zero_and_leave_the_statistics():
    o = torch.tensor(O, dtype=torch.float64).flatten()
    s = torch.tensor(S, dtype=torch.float64).repeat_interleave(3)
    g = torch.arange(3).repeat_interleave(3)
    bad = o.clone()
    bad[2] = math.nan  # item 0's third prediction is unparseable
    r_rank, r_abs = rank_reward(bad, s, g), absolute_reward(bad, s, 0.1)
    assert r_rank[2] == 0 and r_abs[2] == 0
    # the same as leaving that row out of the batch entirely
    keep = torch.arange(9) != 2
    close(r_rank[keep], rank_reward(o[keep], s[keep], g[keep]))
    # an item with no parseable prediction is no comparator: item 2 ranked against item 1 only
    none = o.clone()
    none[:3] = math.nan
    got = rank_reward(none, s, g)
    assert got[:3].tolist() == [0.0, 0.0, 0.0]
    close(got[3:], rank_reward(o[3:], s[3:], g[3:]))


def test_edge_cases_single_item_single_sample_equal_predictions_and_bad_truth():
    s = torch.tensor([0.5, 0.5])
    assert rank_reward(torch.tensor([0.4, 0.6]), s, torch.tensor([0, 0])).tolist() == [0.0, 0.0]  # one item
    # single samples per item: variance 0, p is a step function of o - mu_j
    got = rank_reward(torch.tensor([0.9, 0.1]), torch.tensor([0.8, 0.2]), torch.tensor([0, 1]))
    close(got, [1.001, 1.001], atol=1e-3)
    # equal predictions and equal truths (y = 1 both ways): p = 0.5, fidelity sqrt(0.5) + sqrt(1e-6)
    got = rank_reward(torch.full((4,), 0.5), torch.full((4,), 0.5), torch.tensor([0, 0, 1, 1]))
    close(got, [math.sqrt(0.5 + 1e-6) + 1e-3] * 4)
    with pytest.raises(ValueError, match="true_score must be finite"):
        rank_reward(torch.tensor([0.5, 0.5]), torch.tensor([0.5, math.nan]), torch.tensor([0, 1]))
    with pytest.raises(ConfigError, match="sigma"):
        SHAPING.build({"name": "rapo_abs", "sigma": 0})
    batch = build_batch([[0.0]] * 2)
    with pytest.raises(ValueError, match=r"'predicted_score' must have shape \[B\] = \[2\], got None"):
        SHAPING.build("rapo_rank")(batch, 8)


def test_present_rows_are_the_parseable_predictions():
    batch = example_batch()
    batch.extras["predicted_score"][4] = math.nan
    assert SHAPING.build("rapo_abs").present(batch).tolist() == [True] * 4 + [False] + [True] * 4


def context(needs):
    return ProviderContext(None, {}, None, None, {}, set(needs))


def test_score_inputs_parse_the_answer_and_read_the_score_column():
    texts = ["0.7", "<think>bright</think><answer>.25</answer>", "about 0.7", "<answer>1</answer> tail", "", "nan"]
    examples = [Example("p", "a", {"score": 0.5 + i / 10}) for i in range(len(texts))]
    batch = build_batch([[0.0]] * len(texts))
    got = PROVIDERS.get("predicted_score")(context({"predicted_score", "true_score"}), Rollouts(batch, texts, examples))
    o = got["predicted_score"]
    assert o[:2].tolist() == [0.7, 0.25] and math.isnan(o[2]) and o[3] == 1.0 and o[4:].isnan().all()
    close(got["true_score"], [0.5, 0.6, 0.7, 0.8, 0.9, 1.0])
    with pytest.raises(ValueError, match=r"column 'score' as a finite number.*has score='high'"):
        PROVIDERS.get("true_score")(context({"true_score"}), Rollouts(build_batch([[0.0]]), ["1"],
                                                                        [Example("p", "a", {"score": "high"})]))


def test_format_reward():
    fmt = get_reward("think_answer_format")
    texts = ["<think>a</think><answer>0.5</answer>", " <think>\n</think>\n<answer>x</answer>\n", "0.5",
             "<think>a</think>", "<answer>0.5</answer><think>a</think>", "<think>a</think><answer>1</answer>!"]
    assert fmt(prompts=[""] * 6, completions=texts) == [1.0, 1.0, 0.0, 0.0, 0.0, 0.0]
