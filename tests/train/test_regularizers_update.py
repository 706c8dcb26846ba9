"""The regularizer stage in the updater: ``coef · Σ u·scope / Σ_minibatch scope`` beside the policy loss, the
student's full distribution when asked, the same gradient whatever the micro-batching; ``guided_nll``."""
import pytest
import torch

from polo.core.aggregation import AGGREGATIONS
from polo.core.losses.base import LossOutput
from polo.core.registry import DIVERGENCES, POLICY_LOSSES, REGULARIZERS, ConfigError
from polo.core.regularizers import Regularizer
from polo.core.segment import masked_mean
from polo.train.config import load_recipe
from polo.train.critics import Critics
from polo.train.update import LossTerms, Updater, UpdateSettings
from tests.train.test_micro_batch_tokens import policy64, scored_batch


class NegEntropyOnCorrect(Regularizer):
    """u = Σ_v p log p (the negative entropy) over the tokens of correct rows (built directly, not registered)."""

    full_distribution = True

    def scope(self, batch):
        return batch.mask * batch.extras["correct"].to(batch.mask)[:, None]

    def __call__(self, logp, batch, logprobs=None):
        return LossOutput((logprobs.exp() * logprobs).sum(-1), {})


NegEntropyOnCorrect.registry_name = "test_neg_entropy_on_correct"  # named as a registry would, not registered


def gradient(micro_batch_size, regularizers, policy_loss="ppo_clip"):
    policy = policy64()
    batch = scored_batch(policy)
    terms = LossTerms(POLICY_LOSSES.build(policy_loss), AGGREGATIONS.build("token_mean"), DIVERGENCES.build("k3"),
                      regularizers=regularizers)
    settings = UpdateSettings(max_new_tokens=5, micro_batch_size=micro_batch_size, grad_clip=None)  # unclipped: terms add
    updater = Updater(policy, torch.optim.SGD(policy.parameters(), lr=0.0), terms, Critics([], None), settings,
                      torch.Generator().manual_seed(0))
    grads = []
    updater.optimizer_step = lambda factor: grads.append(torch.cat([p.grad.reshape(-1) for p in updater.params]))
    stats = updater.run(batch)
    return grads[0], stats, policy, batch


def test_a_regularizer_adds_its_scoped_mean_to_the_loss():
    reg = NegEntropyOnCorrect(coef=0.5)
    base, _, _, _ = gradient(None, [])
    both, stats, policy, batch = gradient(None, [reg])
    alone, _, _, _ = gradient(None, [reg], policy_loss="none") if "none" in POLICY_LOSSES else (None, None, None, None)
    # the term's own value: 0.5 · mean over correct rows' tokens of Σ p log p
    fw = policy.forward_logp(batch.prompt_ids, batch.prompt_mask, batch.response_ids, batch.response_mask,
                             return_full=True)
    value = masked_mean((fw["logprobs_full"].exp() * fw["logprobs_full"]).sum(-1), reg.scope(batch)).detach()
    assert stats["loss/test_neg_entropy_on_correct"] == pytest.approx(float(value), rel=1e-6)
    assert float((both - base).norm()) > 1e-6
    if alone is not None:  # the policy loss and the term add up
        assert float((both - base - alone).norm() / both.norm()) < 1e-6


def test_micro_batches_give_the_unsplit_gradient_with_a_regularizer():
    reg = NegEntropyOnCorrect(coef=0.5)
    full, _, _, _ = gradient(None, [reg])
    split, _, _, _ = gradient(2, [reg])
    assert float((split - full).norm() / full.norm()) < 1e-6  # the logits are float32 (test_micro_batch_tokens)


def test_recipes_list_regularizers_and_unknown_ones_are_named(tiny):
    recipe = load_recipe("rgpo", tiny)
    assert recipe.built().regularizers[0].registry_name == "guided_nll"
    with pytest.raises(ConfigError, match=r"unknown regularizer 'nope'"):
        load_recipe("grpo", [*tiny, "regularizers=[{name: nope}]"])
    with pytest.raises(ConfigError, match="guided"):  # guided_nll reads what only the guided engine writes
        load_recipe("grpo", [*tiny, "regularizers=[{name: guided_nll}]"])


def test_guided_nll_averages_minus_logp_over_the_guided_rows():
    policy = policy64()
    batch = scored_batch(policy)
    batch.extras["guided"] = torch.zeros(batch.batch_size)
    batch.extras["guided"][[1, 7]] = 1.0
    reg = REGULARIZERS.build({"name": "guided_nll"})
    assert reg.coef == 0.001
    scope = reg.scope(batch)
    assert torch.equal(scope.sum(1) > 0, batch.extras["guided"].bool() & (batch.mask.sum(1) > 0))
    out = reg(batch.old_logp, batch)
    expected = -(batch.old_logp * scope).sum() / scope.sum()
    assert float(out.metrics["nll"]) == pytest.approx(float(expected))
