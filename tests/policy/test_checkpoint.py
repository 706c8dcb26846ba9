"""A locally built Hugging Face checkpoint (byte-level BPE tokenizer with a chat template, tiny Qwen2)."""
import pytest
import torch

from polo.policy import Policy
from polo.engines.sampler import sample

@pytest.fixture(scope="module")
def checkpoint(chat_checkpoint):
    return chat_checkpoint(128)


def test_load_chat_template_sample_and_logp(checkpoint, f32):
    policy = Policy.load(checkpoint, chat_template=True, dtype=torch.float64)  # two model paths below (Float32)
    assert policy.eos_token_id == policy.tokenizer.convert_tokens_to_ids("<|im_end|>")
    prompts = ["What is two plus three?", "Hi"]
    ids, mask = policy.encode_prompts(prompts)
    assert mask[:, -1].all() and not mask[1, 0]
    texts = [policy.tokenizer.decode(row[m.bool()]) for row, m in zip(ids, mask)]
    assert texts == [f"<|im_start|>user\n{p}<|im_end|>\n<|im_start|>assistant\n" for p in prompts]
    out = sample(policy, ids, mask, max_new_tokens=8, temperature=0.8, generator=torch.Generator().manual_seed(0))
    texts = policy.decode(out.response_ids, out.response_mask)
    keep = out.response_mask.bool() & (out.response_ids != policy.eos_token_id)
    assert texts == [policy.tokenizer.decode(r[k], skip_special_tokens=True) for r, k in zip(out.response_ids, keep)]
    logp = policy.forward_logp(ids, mask, out.response_ids, out.response_mask, temperature=0.8)["logp"]
    atol = f32.logp_atol(policy, ids, mask, out.response_ids, out.response_mask, temperature=0.8)  # ≈ 1.2e-5
    torch.testing.assert_close(logp, out.logp, atol=atol, rtol=0)
