"""Mixed precision (``model.dtype=bfloat16``: the model calls under torch.autocast, parameters float32) and the
device check."""
import math

import pytest
import torch

from polo.core.registry import ConfigError
from polo.policy import TinyModelConfig, ValueModel
from polo.policy.inputs import concat_inputs
from polo.policy.policy import resolve_device
from polo.policy.reference import frozen_copy
from polo.policy.policy import build_tiny_policy
from polo.engines.sampler import sample

SMALL = TinyModelConfig(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64)
BF16_U = 2.0**-8
"""bfloat16's unit roundoff: 8 significant bits (7 stored + the implicit one), round to nearest."""


def bf16_logp_atol(max_logit: float, layers: int) -> float:
    """How far bfloat16 autocast may move a response log-prob.

    Autocast rounds both operands of every matmul to bfloat16 (relative error ≤ u = 2⁻⁸ each) and accumulates
    in float32, so a matmul output errs by ≤ 2u of the magnitude it sums. A logit passes through 2 matmul
    chains per layer (attention, MLP) and the LM head, whose errors add along the residual stream: ≤
    2u·(2L + 1)·max|z|. ``logp = z_tok − logsumexp(z)`` then errs by at most twice that (two logits' errors).
    Measured on these models: 1–3.4 u·max|z|, well inside."""
    return 2 * 2 * BF16_U * (2 * layers + 1) * max_logit


@pytest.fixture
def policy():
    torch.manual_seed(0)
    return build_tiny_policy(SMALL).eval()


def batch(policy):
    p_ids, p_mask = policy.encode_prompts([p for p in ["2+3=", "17+25=", "4+4="] for _ in range(2)])
    g = torch.Generator().manual_seed(1)
    r_ids = torch.randint(3, 20, (len(p_ids), 6), generator=g)
    r_mask = (torch.arange(6) < torch.randint(1, 7, (len(p_ids), 1), generator=g)).long()
    return p_ids, p_mask, r_ids, r_mask


def test_bf16_log_probs_are_float32_and_close_to_float32_ones(policy, f32):
    p_ids, p_mask, r_ids, r_mask = batch(policy)
    with torch.no_grad():
        exact = policy.forward_logp(p_ids, p_mask, r_ids, r_mask, return_entropy=True, hidden_layer=1)
        max_logit = float(policy.model(**concat_inputs(p_ids, p_mask, r_ids)).logits.abs().max())
        policy.compute_dtype = torch.bfloat16
        with policy.autocast():
            assert policy.model(input_ids=p_ids).logits.dtype == torch.bfloat16  # the matmuls really are bf16
        mixed = policy.forward_logp(p_ids, p_mask, r_ids, r_mask, return_entropy=True, hidden_layer=1)
    assert all(mixed[k].dtype == torch.float32 for k in ("logp", "entropy", "hidden_states"))
    assert all(p.dtype == torch.float32 for p in policy.parameters())  # master weights untouched
    error = float((mixed["logp"] - exact["logp"]).abs().max())
    assert error <= bf16_logp_atol(max_logit, SMALL.num_layers)
    assert error > f32.atol(max_logit + math.log(len(policy.tokenizer)), len(policy.tokenizer))  # not float32


def test_bf16_sampler_reference_and_critic_return_float32(policy):
    """The sampler, a reference copy and the critic run in the policy's precision and hand float32 to the core."""
    policy.compute_dtype = torch.bfloat16
    p_ids, p_mask, r_ids, r_mask = batch(policy)
    out = sample(policy, p_ids, p_mask, max_new_tokens=5, generator=torch.Generator().manual_seed(2),
                 return_entropy=True, return_hidden=True)
    assert out.logp.dtype == out.entropy.dtype == out.hidden.dtype == torch.float32
    with torch.no_grad():  # sampling and scoring: each within bf16_logp_atol of float32, so within twice it
        again = policy.forward_logp(p_ids, p_mask, out.response_ids, out.response_mask)["logp"]
        max_logit = float(policy.model(**concat_inputs(p_ids, p_mask, out.response_ids)).logits.abs().max())
    assert float((again - out.logp).abs().max()) <= 2 * bf16_logp_atol(max_logit, SMALL.num_layers)
    reference = frozen_copy(policy)
    assert reference.compute_dtype == torch.bfloat16
    assert reference.forward_logp(p_ids, p_mask, r_ids, r_mask)["logp"].dtype == torch.float32
    critic = ValueModel.from_policy(policy)
    assert critic.compute_dtype == torch.bfloat16
    assert critic(p_ids, p_mask, r_ids, r_mask).dtype == torch.float32


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without cuda")
@pytest.mark.parametrize("name", ["cuda", "cuda:1"])
def test_cuda_without_cuda_is_a_clear_config_error(name):
    with pytest.raises(ConfigError, match=rf"model.device='{name}', but torch.cuda.is_available\(\) is false"):
        resolve_device(name)
    assert resolve_device("cpu") == torch.device("cpu")
