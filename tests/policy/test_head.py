"""The response-only, chunked lm_head (polo.policy.head) and ``Policy.forward_logp``'s use of it."""
import pytest
import torch

from polo.policy import TinyModelConfig, policy as policy_module
from polo.policy.head import response_head_logp
from polo.policy.policy import build_tiny_policy

SMALL = TinyModelConfig(hidden_size=32, num_heads=2, intermediate_size=64)


def plain(hidden, weight, targets, temperature):
    z = hidden @ weight.t() / temperature
    logp = z.log_softmax(-1)
    return logp.gather(-1, targets[:, None]).squeeze(-1), -(logp.exp() * logp).sum(-1)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("chunk_elements", [1, 7 * 50, 1 << 22])  # one token a chunk, chunks cutting N = 37, one chunk
def test_log_probs_entropies_and_both_gradients_equal_the_plain_head(temperature, chunk_elements):
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(37, 16, dtype=torch.float64, generator=g, requires_grad=True)
    weight = torch.randn(50, 16, dtype=torch.float64, generator=g, requires_grad=True)
    targets = torch.randint(0, 50, (37,), generator=g)
    logp, entropy = response_head_logp(hidden, weight, targets, temperature=temperature, with_entropy=True,
                                       chunk_elements=chunk_elements)
    want_logp, want_entropy = plain(hidden, weight, targets, temperature)
    torch.testing.assert_close(logp, want_logp, rtol=0, atol=1e-12)  # float64 throughout: ~1e-14 measured
    torch.testing.assert_close(entropy, want_entropy, rtol=0, atol=1e-12)
    a, b = torch.randn(37, dtype=torch.float64, generator=g), torch.randn(37, dtype=torch.float64, generator=g)
    for loss, want in (((logp * a).sum() + (entropy * b).sum(), (want_logp * a).sum() + (want_entropy * b).sum()),
                       ((logp * a).sum(), (want_logp * a).sum()), ((entropy * b).sum(), (want_entropy * b).sum())):
        got = torch.autograd.grad(loss, (hidden, weight), retain_graph=True)
        expected = torch.autograd.grad(want, (hidden, weight), retain_graph=True)
        for x, y in zip(got, expected):
            torch.testing.assert_close(x, y, rtol=0, atol=1e-11)


def test_entropy_is_zero_unless_asked_and_temperature_must_be_positive():
    hidden, weight = torch.randn(3, 4), torch.randn(5, 4)
    assert torch.equal(response_head_logp(hidden, weight, torch.tensor([0, 1, 2]))[1], torch.zeros(3))
    with pytest.raises(ValueError, match="temperature=0"):
        response_head_logp(hidden, weight, torch.tensor([0, 1, 2]), temperature=0)


def batch(policy, rows=12, width=7):
    """Prompts of 3 lengths, each 4 times (shared prefills); responses of 0 … ``width`` tokens, a masked-out token
    inside."""
    p_ids, p_mask = policy.encode_prompts([p for p in ["2+3=", "17+25=", "a"] for _ in range(4)][:rows])
    g = torch.Generator().manual_seed(1)
    r_ids = torch.randint(3, 40, (rows, width), generator=g)
    r_mask = (torch.arange(width) < torch.randint(0, width + 1, (rows, 1), generator=g)).long()
    r_mask[:, 1] = 0
    return p_ids, p_mask, r_ids, r_mask


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("pack", [False, True])
def test_forward_logp_on_the_response_head_equals_the_models_own_logits(arch, pack, f32):
    """The head on the response tokens alone (default path) against the model's own ``[B, T, V]`` logits
    (``return_full`` takes that path): log-probs, entropies and parameter gradients, padded or packed rows."""
    torch.manual_seed(0)
    policy = build_tiny_policy(SMALL.model_copy(update={"arch": arch})).double()
    policy.pack_rows = pack
    assert policy.response_head() is policy.hf_model.lm_head
    p_ids, p_mask, r_ids, r_mask = batch(policy)
    results, grads = [], []
    for full in (False, True):
        out = policy.forward_logp(p_ids, p_mask, r_ids, r_mask, temperature=0.7, return_entropy=True,
                                  return_full=full)
        results.append(out)
        policy.zero_grad()
        (out["logp"].sum() + 0.3 * out["entropy"].sum()).backward()
        grads.append({n: p.grad.clone() for n, p in policy.named_parameters()})
    head, full = results
    # float64 model, float32 results: both paths' logp/entropy end in float32 (f32.logp_atol bounds that step)
    atol = f32.logp_atol(policy, p_ids, p_mask, r_ids, r_mask, 0.7)
    torch.testing.assert_close(head["logp"], full["logp"], atol=atol, rtol=0)
    torch.testing.assert_close(head["entropy"], full["entropy"], atol=atol, rtol=0)
    assert bool((head["logp"][r_mask == 0] == 0).all()) and bool((head["entropy"][r_mask == 0] == 0).all())
    for name, grad in grads[0].items():
        # the gradients flow back from float32 results through float64 models: a float32 ulp of each upstream term
        torch.testing.assert_close(grad, grads[1][name], atol=1e-4 * grad.abs().max().item() + 1e-6, rtol=0,
                                   msg=name)


def test_a_32k_vocabulary_keeps_no_batch_by_vocabulary_tensor_for_the_backward():
    """At a real checkpoint's vocabulary (32,000) the training forward keeps nothing of the vocabulary's width for
    the backward but the head's own weight; the model's own logits would keep ``[B, T, V]``."""
    torch.manual_seed(0)
    policy = build_tiny_policy(SMALL)
    policy.tokenizer.add_tokens([f"<f{i}>" for i in range(32_000 - len(policy.tokenizer))])
    policy.hf_model.resize_token_embeddings(32_000, mean_resizing=False)
    V, d = 32_000, SMALL.hidden_size
    p_ids, p_mask, r_ids, r_mask = batch(policy)
    r_ids[:, 0] = 31_999  # a token from the far end of the vocabulary

    def saved_shapes(**kwargs):
        shapes = []
        with torch.autograd.graph.saved_tensors_hooks(lambda t: shapes.append(tuple(t.shape)) or t, lambda t: t):
            out = policy.forward_logp(p_ids, p_mask, r_ids, r_mask, return_entropy="metric", **kwargs)
        return out, {s for s in shapes if V in s}

    head, kept = saved_shapes()
    assert kept == {(V, d)}  # the (tied) head weight, nothing [rows, V]
    full, kept_full = saved_shapes(return_full=True)
    assert any(len(s) == 3 for s in kept_full)  # the model's own forward keeps [B, T, V] logits
    # two float32 reductions over V terms in other orders: a few ulps × √V of the magnitude, max|z| + ln V (≈ 11)
    atol = 8 * torch.finfo(torch.float32).eps * V ** 0.5 * (full["entropy"].abs().max().item() + 1)
    torch.testing.assert_close(head["logp"], full["logp"], atol=atol, rtol=0)
    torch.testing.assert_close(head["entropy"], full["entropy"], atol=atol, rtol=0)


def test_policies_whose_logits_are_not_the_plain_head_take_the_models_forward(monkeypatch):
    torch.manual_seed(0)
    policy = build_tiny_policy(SMALL)
    monkeypatch.setattr(policy_module, "PLAIN_HEAD_MODELS", frozenset({"qwen3"}))
    assert policy.response_head() is None  # e.g. Gemma's soft-capped logits
    monkeypatch.undo()
    policy.hf_model.lm_head.bias = torch.nn.Parameter(torch.zeros(policy.hf_model.config.vocab_size))
    assert policy.response_head() is None
