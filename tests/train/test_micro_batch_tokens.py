"""Micro-batches by a token budget (``train.micro_batch_tokens``): within the budget, groups whole when asked,
and the same gradient as the unsplit minibatch."""
import pytest
import torch

from polo.core.aggregation import AGGREGATIONS
from polo.core.batch import RolloutBatch
from polo.core.registry import DIVERGENCES, POLICY_LOSSES, ConfigError
from polo.policy.policy import Policy
from polo.policy.tiny import TinyModelConfig, build_tiny_model
from polo.policy.tokenizer import build_char_tokenizer
from polo.train.config import load_recipe
from polo.train.critics import Critics
from polo.train.update import LossTerms, Updater, UpdateSettings, micro_batches, padded_lengths

GROUP = torch.tensor([0, 0, 0, 1, 1, 2, 2, 2, 2, 3, 4, 4])
LENGTHS = torch.tensor([5, 9, 5, 3, 3, 7, 7, 2, 7, 30, 4, 4])  # row 9 alone is above a budget of 20


def padded(parts: list[torch.Tensor]) -> list[int]:
    return [len(p) * int(LENGTHS[p].max()) for p in parts]


@pytest.mark.parametrize("whole_groups", [False, True])
@pytest.mark.parametrize("budget", [20, 30, 64])
def test_token_budget_micro_batches_stay_within_it(whole_groups, budget):
    parts = micro_batches(GROUP, None, whole_groups=whole_groups, lengths=LENGTHS, max_tokens=budget)
    assert torch.equal(torch.cat(parts), torch.arange(len(GROUP)))  # every row once, in order
    assert len(parts) > 1
    for p, size in zip(parts, padded(parts)):  # within the budget, except a lone unit above it
        assert size <= budget or (len(set(GROUP[p].tolist())) == 1 if whole_groups else len(p) == 1)
    if whole_groups:  # no group in two micro-batches
        seen = [set(GROUP[p].tolist()) for p in parts]
        assert all(a.isdisjoint(b) for i, a in enumerate(seen) for b in seen[i + 1:])


def test_a_row_above_the_budget_is_its_own_micro_batch_and_both_limits_apply():
    parts = micro_batches(GROUP, None, lengths=LENGTHS, max_tokens=20)
    assert [9] in [p.tolist() for p in parts]  # 30 tokens > 20: alone, not an error
    parts = micro_batches(GROUP, 2, lengths=LENGTHS, max_tokens=10**6)  # the row limit binds
    assert [len(p) for p in parts] == [2] * 6
    parts = micro_batches(GROUP, 4, lengths=torch.full((12,), 10), max_tokens=30)  # the token limit binds
    assert [len(p) for p in parts] == [3] * 4


def policy64() -> Policy:
    """Float64 model: summing micro-batch gradients errs far below 1e-6 (see test_updater_standalone)."""
    torch.manual_seed(0)
    tokenizer = build_char_tokenizer()
    cfg = TinyModelConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64)
    return Policy(build_tiny_model(cfg, tokenizer).double(), tokenizer)


def scored_batch(policy: Policy) -> RolloutBatch:
    """4 groups of 3 (prompts of different lengths), random responses and advantages, on-policy old log-probs."""
    prompts = [p for p in ["1+2=", "13+4=", "5+60=", "71+28="] for _ in range(3)]
    prompt_ids, prompt_mask = policy.encode_prompts(prompts)
    g = torch.Generator().manual_seed(0)
    B = len(prompts)
    response_ids = torch.randint(3, 20, (B, 5), generator=g)
    response_mask = (torch.arange(5) < torch.randint(1, 6, (B, 1), generator=g)).long()
    with torch.no_grad():
        old = policy.forward_logp(prompt_ids, prompt_mask, response_ids, response_mask)["logp"]
    correct = (torch.rand(B, generator=g) < 0.5).double()
    advantages = torch.randn(B, 1, generator=g, dtype=torch.float64).expand(B, 5) * response_mask
    return RolloutBatch(prompt_ids, prompt_mask, response_ids, response_mask, torch.arange(4).repeat_interleave(3),
                        correct[:, None], old_logp=old, advantages=advantages, extras={"correct": correct})


def step_gradient(loss: str, aggregation: str, budget: int | None, whole_groups: bool) -> tuple[torch.Tensor, int]:
    """The flattened gradient of the updater's one optimizer step, and the number of micro-batches it ran."""
    policy = policy64()
    batch = scored_batch(policy)
    forwards = [0]
    forward = policy.forward_logp
    policy.forward_logp = lambda *a, **k: (forwards.__setitem__(0, forwards[0] + 1), forward(*a, **k))[1]
    terms = LossTerms(POLICY_LOSSES.build(loss), AGGREGATIONS.build(aggregation), DIVERGENCES.build("k3"))
    settings = UpdateSettings(max_new_tokens=5, whole_groups=whole_groups, micro_batch_tokens=budget)
    updater = Updater(policy, torch.optim.SGD(policy.parameters(), lr=0.0), terms, Critics([], None), settings,
                      torch.Generator().manual_seed(0))
    grads = []
    updater.optimizer_step = lambda factor: grads.append(torch.cat([p.grad.reshape(-1) for p in updater.params]))
    updater.run(batch)
    return grads[0], forwards[0]


@pytest.mark.parametrize("loss, aggregation, whole_groups", [("ppo_clip", "token_mean", False),
                                                            ("ppo_clip", "seq_mean_token_mean", False),
                                                            ("drpo", "token_mean", True)])
def test_token_budget_micro_batches_give_the_unsplit_gradient(loss, aggregation, whole_groups):
    batch = scored_batch(policy64())
    budget = 3 * int(padded_lengths(batch).max())  # about one group of 3 per micro-batch
    full, one = step_gradient(loss, aggregation, None, whole_groups)
    split, several = step_gradient(loss, aggregation, budget, whole_groups)
    assert one == 1 and several >= 4
    assert full.norm() > 0
    assert float((split - full).norm() / full.norm()) < 1e-6


def test_nonsense_token_budgets_are_refused(tiny):
    with pytest.raises(ConfigError, match=r"micro_batch_tokens=10 cannot hold train.micro_batch_size=8 rows"):
        load_recipe("grpo", [*tiny, "train.micro_batch_size=8", "train.micro_batch_tokens=10"])
    with pytest.raises(ConfigError, match="train.micro_batch_tokens"):
        load_recipe("grpo", [*tiny, "train.micro_batch_tokens=0"])
    with pytest.raises(ConfigError, match="train.micro_batch_tokens"):
        load_recipe("grpo", [*tiny, "train.micro_batch_tokens=true"])
    assert load_recipe("grpo", [*tiny, "train.micro_batch_size=8", "train.micro_batch_tokens=512"])
