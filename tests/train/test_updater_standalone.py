"""The updater without a trainer: DRPO's per-group objective through real micro-batching."""
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
from polo.train.update import LossTerms, Updater, UpdateSettings

PROMPTS = ["1+2=", "13+4=", "5+60="]
G = 4


def policy64() -> Policy:
    """A tiny policy in float64: summing micro-batch gradients then errs far below 1e-6 (the log-softmax itself
    runs in float32 in ``forward_logp``, but on the same logits in every split, so it rounds alike)."""
    torch.manual_seed(0)
    tokenizer = build_char_tokenizer()
    cfg = TinyModelConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64)
    return Policy(build_tiny_model(cfg, tokenizer).double(), tokenizer)


def drpo_batch(policy: Policy) -> RolloutBatch:
    """3 groups of 4 random responses, 2 correct and 2 wrong per group, on-policy behaviour log-probs."""
    prompt_ids, prompt_mask = policy.encode_prompts([p for p in PROMPTS for _ in range(G)])
    g = torch.Generator().manual_seed(0)
    B = len(PROMPTS) * G
    response_ids = torch.randint(3, 20, (B, 5), generator=g)
    response_mask = (torch.arange(5) < torch.randint(1, 6, (B, 1), generator=g)).long()
    with torch.no_grad():
        old = policy.forward_logp(prompt_ids, prompt_mask, response_ids, response_mask)["logp"]
    correct = torch.tensor([1.0, 0.0, 1.0, 0.0] * len(PROMPTS), dtype=torch.float64)
    return RolloutBatch(prompt_ids, prompt_mask, response_ids, response_mask,
                        torch.arange(len(PROMPTS)).repeat_interleave(G), correct[:, None], old_logp=old,
                        advantages=torch.zeros(B, 5, dtype=torch.float64), extras={"correct": correct})


def drpo_gradient(micro_batch_size: int | None, whole_groups: bool = True) -> torch.Tensor:
    """The flattened gradient of the one optimizer step the real updater takes on ``drpo_batch``."""
    policy = policy64()
    optimizer = torch.optim.SGD(policy.parameters(), lr=0.0)
    terms = LossTerms(POLICY_LOSSES.build("drpo"), AGGREGATIONS.build("token_mean"), DIVERGENCES.build("k3"))
    settings = UpdateSettings(micro_batch_size=micro_batch_size, max_new_tokens=5, whole_groups=whole_groups)
    updater = Updater(policy, optimizer, terms, Critics([], None), settings, torch.Generator().manual_seed(0))
    grads = []
    updater.optimizer_step = lambda factor: grads.append(torch.cat([p.grad.reshape(-1) for p in updater.params]))
    updater.run(drpo_batch(policy))
    assert len(grads) == 1
    return grads[0]


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


@pytest.mark.parametrize("size", [4, 8])
def test_drpo_gradient_is_the_same_with_whole_group_micro_batches(size):
    full = drpo_gradient(None)
    assert full.norm() > 0
    assert relative_error(drpo_gradient(size), full) < 1e-6


def test_splitting_groups_would_change_drpo_gradient():
    """The check above can fail: micro-batches of 6 rows cut groups of 4 and move the gradient far."""
    assert relative_error(drpo_gradient(6, whole_groups=False), drpo_gradient(None)) > 0.05


@pytest.mark.parametrize("size", [1, 2, 3])
def test_micro_batches_that_split_groups_are_refused_for_drpo(size, tiny):
    with pytest.raises(ConfigError, match=f"micro_batch_size={size} would split groups .* drpo needs whole groups"):
        load_recipe("drpo", [*tiny, "rollout.samples_per_prompt=4", f"train.micro_batch_size={size}"])
    load_recipe("drpo", [*tiny, "rollout.samples_per_prompt=4", "train.micro_batch_size=8"])
    load_recipe("grpo", [*tiny, "rollout.samples_per_prompt=4", f"train.micro_batch_size={size}"])  # no whole-group need
