"""NLPO's ActionMaskedPolicy: the sampler and the training forward both see the masking policy's nucleus."""
import pytest
import torch

from polo.core.action_mask import top_p_allow
from polo.policy.action_mask import ActionMaskedPolicy
from polo.policy.policy import Policy
from polo.policy.reference import frozen_copy
from polo.policy.tiny import TinyModelConfig, build_tiny_model
from polo.policy.tokenizer import build_char_tokenizer
from polo.engines.sampler import sample


def tiny_policy(seed: int) -> Policy:
    torch.manual_seed(seed)
    tokenizer = build_char_tokenizer()
    cfg = TinyModelConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64)
    return Policy(build_tiny_model(cfg, tokenizer), tokenizer)


def test_sampling_stays_in_the_nucleus_and_training_logp_matches_the_sampler(f32):
    # a masking policy unlike the policy restricts it; float64: sampler and training forward are two model paths
    policy, masking = tiny_policy(0).double(), tiny_policy(1).double()
    masked = ActionMaskedPolicy(policy, masking, top_p=0.3)
    ids, mask = policy.encode_prompts(["12+3=", "7+45=", "9+9="])
    out = sample(masked, ids, mask, max_new_tokens=6, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        mask_logits = masking.forward_logp(ids, mask, out.response_ids, out.response_mask, return_full=True)
        allow = top_p_allow(mask_logits["logprobs_full"], 0.3, always_allowed=masked.always)
    taken = allow.gather(-1, out.response_ids[..., None]).squeeze(-1)
    assert taken[out.response_mask.bool()].all()  # every sampled token is inside ψ's nucleus
    assert (allow.sum(-1)[out.response_mask.bool()] < allow.shape[-1]).any()  # and the nucleus excludes tokens
    masked_fw = masked.forward_logp(ids, mask, out.response_ids, out.response_mask)["logp"]
    plain_fw = policy.forward_logp(ids, mask, out.response_ids, out.response_mask)["logp"]
    # renormalized over the nucleus, log π̃ ≥ log π; equal to the sampler's. Both up to the float32
    # log-softmax of each path: a few ulps of max|z| + ln V and of √V (f32.logp_atol): ≈ 7e-6 (measured ≤ 5e-7)
    atol = f32.logp_atol(policy, ids, mask, out.response_ids, out.response_mask)
    torch.testing.assert_close(masked_fw, out.logp, atol=atol, rtol=0)
    assert (masked_fw >= plain_fw - atol).all() and (masked_fw > plain_fw + 1e-3).any()
    # the diagnostic NLPO logs: the share of the vocabulary outside the nucleus at the response tokens
    tokens = out.response_ids != policy.pad_token_id
    expected = (~allow.scatter(-1, out.response_ids[..., None], True))[tokens].float().mean()
    assert 0.0 < masked.masked_vocab_frac == pytest.approx(float(expected), abs=1e-6)


def test_wrapper_shares_parameters_and_state_with_the_policy():
    policy = tiny_policy(0)
    masked = ActionMaskedPolicy(policy, frozen_copy(policy), top_p=0.9)
    assert [p.data_ptr() for p in masked.parameters()] == [p.data_ptr() for p in policy.parameters()]
    assert masked.state_dict().keys() == policy.state_dict().keys()  # the masking policy is not the policy's state
