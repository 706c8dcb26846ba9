"""Prompt sharing (polo.policy.prefix): each distinct prompt is computed once, results equal a plain forward."""
import pytest
import torch

from polo.policy import TinyModelConfig, ValueModel
from polo.policy.inputs import concat_inputs
from polo.policy.policy import token_logp
from polo.policy import prefix
from polo.policy.prefix import distinct_prompts, read_after_prompt
from polo.policy.policy import build_tiny_policy

SMALL = TinyModelConfig(hidden_size=32, num_heads=2, intermediate_size=64)


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def policy(request):
    """In float64: every test here compares two paths through the model (see Float32 in conftest)."""
    torch.manual_seed(0)
    return build_tiny_policy(SMALL.model_copy(update={"arch": request.param})).double()


def grouped_batch(policy, order_seed=0):
    """3 prompts of different lengths × 4 samples, rows shuffled; responses of different lengths."""
    prompts = [p for p in ["2+3=", "17+25=", "a"] for _ in range(4)]
    order = torch.randperm(len(prompts), generator=torch.Generator().manual_seed(order_seed)).tolist()
    p_ids, p_mask = policy.encode_prompts([prompts[i] for i in order])
    g = torch.Generator().manual_seed(1)
    r_ids = torch.randint(3, 40, (len(prompts), 5), generator=g)
    r_mask = (torch.arange(5) < torch.randint(1, 6, (len(prompts), 1), generator=g)).long()
    return p_ids, p_mask, r_ids, r_mask


def plain_logp(policy, p_ids, p_mask, r_ids, r_mask):
    T = r_ids.shape[1]
    logits = policy.model(**concat_inputs(p_ids, p_mask, r_ids), use_cache=False, logits_to_keep=T + 1).logits
    return token_logp(logits[:, :-1].float(), r_ids).masked_fill(r_mask == 0, 0.0)


@pytest.mark.parametrize("collide", [False, True])
def test_distinct_prompts_inverse_rebuilds_the_batch(policy, monkeypatch, collide):
    if collide:  # every row hashes to 0: the exact check must catch it
        monkeypatch.setattr(prefix, "hash_weights", lambda width, device: torch.zeros(width, dtype=torch.long))
    p_ids, p_mask, _, _ = grouped_batch(policy)
    ids, mask, inverse = distinct_prompts(p_ids, p_mask)
    assert len(ids) == 3 and torch.equal(ids[inverse], p_ids) and torch.equal(mask[inverse], p_mask)


def test_shared_forward_equals_plain_forward_values_and_gradients(policy, f32):
    p_ids, p_mask, r_ids, r_mask = grouped_batch(policy)
    params = list(policy.parameters())
    plain = plain_logp(policy, p_ids, p_mask, r_ids, r_mask)
    shared = policy.forward_logp(p_ids, p_mask, r_ids, r_mask)["logp"]
    # cached prompt + continuation vs one forward: ≈ 7e-6 (see f32.logp_atol)
    torch.testing.assert_close(shared, plain, atol=f32.logp_atol(policy, p_ids, p_mask, r_ids, r_mask), rtol=0)
    weights = torch.randn(plain.shape, generator=torch.Generator().manual_seed(2))
    g_plain = torch.autograd.grad((plain * weights).sum(), params)
    g_shared = torch.autograd.grad((shared * weights).sum(), params)
    # the float32 log-softmax backward (equal or 1-ulp-apart logits) gives the float64 model upstream
    # gradients a few ulps apart; a weight's gradient sums them over every token position
    positions = p_ids.numel() + r_ids.numel()
    for a, b in zip(g_plain, g_shared):
        torch.testing.assert_close(b, a, atol=f32.atol(a.abs().max(), positions), rtol=0)


def test_single_token_responses_and_all_distinct_prompts(policy, f32):
    p_ids, p_mask, r_ids, r_mask = grouped_batch(policy)
    one = policy.forward_logp(p_ids, p_mask, r_ids[:, :1], r_mask[:, :1])["logp"]  # prefill only, no tail
    atol = f32.logp_atol(policy, p_ids, p_mask, r_ids, r_mask)  # two paths: ≈ 7e-6
    torch.testing.assert_close(one, plain_logp(policy, p_ids, p_mask, r_ids[:, :1], r_mask[:, :1]), atol=atol, rtol=0)
    first = torch.tensor([0, 1, 2])  # no repeated prompt: the plain path
    ids, mask, _ = distinct_prompts(p_ids, p_mask)
    sub = ids[first], mask[first], r_ids[:3], r_mask[:3]
    torch.testing.assert_close(policy.forward_logp(*sub)["logp"], plain_logp(policy, *sub), atol=atol, rtol=0)


def test_value_model_shares_prompts(policy, f32):
    p_ids, p_mask, r_ids, r_mask = grouped_batch(policy)
    critic = ValueModel.from_policy(policy)
    torch.nn.init.normal_(critic.head.weight)
    shared = critic(p_ids, p_mask, r_ids, r_mask)
    T = r_ids.shape[1]
    hidden = critic.trunk(**concat_inputs(p_ids, p_mask, r_ids[:, :-1]), use_cache=False).last_hidden_state[:, -T:]
    plain = critic.head(hidden).squeeze(-1).float().masked_fill(r_mask == 0, 0.0)
    # float64 values that agree to ~1e-13, cast to float32: equal or 1 ulp apart; a few ulps of max|V|
    torch.testing.assert_close(shared, plain, atol=f32.atol(plain.abs().max()), rtol=0)


def test_read_after_prompt_shape_and_architecture(policy):
    assert type(policy.model).__name__ in ("LlamaForCausalLM", "Qwen2ForCausalLM")
    p_ids, p_mask, r_ids, _ = grouped_batch(policy)
    out = read_after_prompt(policy.model, p_ids, p_mask, r_ids, lambda o: o.logits, lm_head=True)
    assert out.shape == (len(p_ids), 1 + r_ids.shape[1], policy.hf_model.config.vocab_size)


def test_distinct_prompts_of_an_unrepeated_batch_keep_its_order(policy):
    p_ids, p_mask = policy.encode_prompts(["9+9=", "1+2=", "35+7="])
    ids, mask, inverse = distinct_prompts(p_ids, p_mask)
    assert ids is p_ids and mask is p_mask and inverse.tolist() == [0, 1, 2]


def test_lora_wrapped_model_shares_prompts(policy, f32):
    from polo.policy import LoraConfig, Policy, apply_lora

    lora = Policy(apply_lora(build_tiny_policy(SMALL).model, LoraConfig(r=4)), policy.tokenizer).double()
    p_ids, p_mask, r_ids, r_mask = grouped_batch(lora)
    shared = lora.forward_logp(p_ids, p_mask, r_ids, r_mask)["logp"]
    atol = f32.logp_atol(lora, p_ids, p_mask, r_ids, r_mask)  # two paths: ≈ 7e-6
    torch.testing.assert_close(shared, plain_logp(lora, p_ids, p_mask, r_ids, r_mask), atol=atol, rtol=0)
    shared.sum().backward()
    assert all(p.grad is not None for p in lora.parameters() if p.requires_grad)
