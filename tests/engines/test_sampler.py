import copy

import pytest
import torch

from transformers import DynamicCache

from conftest import noisy_tiny_policy
from polo.policy import TinyModelConfig, kv_cache, prefix
from polo.policy.policy import build_tiny_policy
from polo.engines.sampler import sample

PROMPTS = ["hello", "a", "what is 2+3?", "xyz", "the quick brown fox", "7*6="]


@pytest.fixture(scope="module")
def policy():
    return noisy_tiny_policy()


@pytest.fixture
def stops(policy):
    """Several stop tokens, so that sampled rows end at different steps."""
    saved = policy.stop_token_ids
    policy.stop_token_ids = [policy.eos_token_id, *range(40, 48)]
    yield policy.stop_token_ids
    policy.stop_token_ids = saved


def run(policy, max_new_tokens=16, seed=0, **kwargs):
    ids, mask = policy.encode_prompts(PROMPTS)
    out = sample(policy, ids, mask, max_new_tokens=max_new_tokens, generator=torch.Generator().manual_seed(seed),
                 **kwargs)
    return ids, mask, out


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_logp_matches_forward_logp(policy, stops, temperature, f32):
    policy = copy.deepcopy(policy).double()  # KV-cached decode steps vs one full forward: in float64 (Float32)
    ids, mask, out = run(policy, temperature=temperature)
    lengths = out.response_mask.sum(1)
    assert lengths.min() < out.response_ids.shape[1]  # some rows ended early
    logp = policy.forward_logp(ids, mask, out.response_ids, out.response_mask, temperature=temperature)["logp"]
    # float32 log-softmax of equal logits by two kernels: a few ulps of max|logit/T| + ln V (≈ 16-28 with
    # these large weights) and of √V: ≈ 1.2e-5 at T = 1, 1.5e-5 at T = 0.7 (measured ≤ 6e-7)
    atol = f32.logp_atol(policy, ids, mask, out.response_ids, out.response_mask, temperature)
    torch.testing.assert_close(logp, out.logp, atol=atol, rtol=0)


def test_greedy_matches_transformers_generate(policy, stops):
    ids, mask, out = run(policy, greedy=True)
    reference = policy.model.generate(input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=16,
                                      eos_token_id=stops, pad_token_id=policy.pad_token_id)[:, ids.shape[1]:]
    assert out.truncated.any() and not out.truncated.all()
    assert torch.equal(out.response_ids, reference)


def test_stop_tokens_truncation_and_max_new_tokens(policy, stops):
    _, _, out = run(policy, max_new_tokens=16)
    B, T = out.response_ids.shape
    assert T <= 16 and out.logp.shape == out.response_mask.shape == (B, T)
    lengths = out.response_mask.sum(1)
    assert torch.equal(out.response_mask, (torch.arange(T) < lengths[:, None]).long())  # a prefix per row
    last = out.response_ids.gather(1, (lengths - 1)[:, None]).squeeze(1)
    ended = torch.isin(last, torch.tensor(stops))
    assert torch.equal(out.truncated, ~ended) and (lengths[out.truncated] == 16).all()
    inside = out.response_mask.bool()
    assert (out.response_ids[~inside] == policy.pad_token_id).all() and (out.logp[~inside] == 0).all()
    first_stop = torch.isin(out.response_ids, torch.tensor(stops)) & inside
    assert (first_stop.sum(1) == ended.long()).all()  # nothing is generated after a stop token
    assert run(policy, max_new_tokens=3)[2].response_ids.shape[1] <= 3


def test_deterministic_given_the_generator(policy):
    _, _, a = run(policy, seed=3, temperature=0.9, top_p=0.9, top_k=20)
    _, _, b = run(policy, seed=3, temperature=0.9, top_p=0.9, top_k=20)
    _, _, c = run(policy, seed=4, temperature=0.9, top_p=0.9, top_k=20)
    assert all((x is None and y is None) or torch.equal(x, y) for x, y in zip(vars(a).values(), vars(b).values()))
    assert not torch.equal(a.response_ids, c.response_ids)


@pytest.mark.parametrize("group", [1, 3])
def test_the_reserved_kv_cache_draws_what_a_dynamic_cache_draws(policy, stops, monkeypatch, group):
    """polo.policy.kv_cache against Hugging Face's ``DynamicCache``: padded prompts, shared prefills (``group``
    samples per prompt), rows stopping at different steps and more new tokens than the reservation's give
    identical outputs, bit for bit."""
    ids, mask = policy.encode_prompts([p for p in PROMPTS for _ in range(group)])

    def draw():
        return sample(policy, ids, mask, max_new_tokens=24, generator=torch.Generator().manual_seed(1))

    reserved = draw()
    lengths = reserved.response_mask.sum(1)
    assert lengths.min() < lengths.max() == 24  # rows left the batch at different steps
    monkeypatch.setattr(prefix, "reserved_cache", lambda config, reserve: DynamicCache(config=config))
    dynamic = draw()
    for name, value in vars(reserved).items():
        assert (value is None and getattr(dynamic, name) is None) or torch.equal(value, getattr(dynamic, name)), name
    monkeypatch.setattr(prefix, "reserved_cache", lambda config, reserve: kv_cache.reserved_cache(config, 2))
    assert torch.equal(draw().logp, reserved.logp)  # a reservation outgrown mid-decode grows without a change


def test_top_k_one_and_tiny_top_p_are_greedy(policy):
    _, _, greedy = run(policy, greedy=True)
    for kwargs in ({"top_k": 1}, {"top_p": 1e-6}, {"temperature": 0.0}):
        assert torch.equal(run(policy, **kwargs)[2].response_ids, greedy.response_ids), kwargs


def test_draw_matches_the_distribution_and_never_picks_excluded_tokens():
    from polo.engines.sampler import _draw

    probs = torch.tensor([0.5, 0.0, 0.3, 0.2])
    z = probs.log().expand(20000, 4)
    draws = _draw(z, 1.0, 0, torch.Generator().manual_seed(0))
    freq = torch.bincount(draws, minlength=4).float() / len(draws)
    sigma = (probs * (1 - probs) / len(draws)).sqrt()  # binomial: ≤ 0.0035 for 20000 draws
    assert freq[1] == 0 and ((freq - probs).abs() <= 4 * sigma).all()  # 4σ per token (measured ≤ 1σ)


def test_compiled_decode_keeps_the_samplers_contract(policy, stops, f32):
    """``rollout.compile_decode``: the one-token steps through ``torch.compile`` (padded prompts, rows leaving the
    batch at different steps, so the compiled graph sees several batch sizes and cache lengths): deterministic for a
    seed, log-probs those of the training forward, and the draws of the eager sampler where no two tokens' CDF
    boundaries fall within rounding of the uniform (always, on this seed)."""
    compiled = copy.deepcopy(policy).double()
    _, _, eager = run(compiled, temperature=0.8)
    compiled.compile_decode = True
    ids, mask, first = run(compiled, temperature=0.8)
    _, _, again = run(compiled, temperature=0.8)
    assert first.response_mask.sum(1).min() < first.response_ids.shape[1]  # rows ended at different steps
    assert all((x is None and y is None) or torch.equal(x, y) for x, y in zip(vars(first).values(), vars(again).values()))
    assert torch.equal(first.response_ids, eager.response_ids)
    logp = compiled.forward_logp(ids, mask, first.response_ids, first.response_mask, temperature=0.8)["logp"]
    atol = f32.logp_atol(compiled, ids, mask, first.response_ids, first.response_mask, 0.8)
    torch.testing.assert_close(logp, first.logp, atol=atol, rtol=0)
    assert "compiled_decode" in compiled.__dict__ and "compiled_decode" not in dict(compiled.named_modules())


def test_rollout_compile_decode_reaches_the_policy_and_is_refused_with_fsdp(tmp_path):
    from polo.core.registry import ConfigError
    from polo.tasks import build_task
    from polo.train.config import load_recipe
    from polo.train.trainer import load_policy

    build_tiny_policy(TinyModelConfig(hidden_size=32, num_heads=2, intermediate_size=64)).save(tmp_path)
    recipe = load_recipe("grpo", [f"model.path={tmp_path}", "rollout.compile_decode=true"])
    assert load_policy(recipe, build_task(recipe.task), ["1+2="], log=lambda _: None).compile_decode is True
    assert load_recipe("grpo", []).rollout.compile_decode is False
    with pytest.raises(ConfigError, match="rollout.compile_decode with dist.shard=fsdp"):
        load_recipe("grpo", [f"model.path={tmp_path}", "rollout.compile_decode=true", "dist.shard=fsdp"])
