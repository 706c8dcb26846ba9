"""The masked diffusion LM policy: ELBO log-probs with shared masks, save/load, its sampler, the warm-start loss."""
import copy

import pytest
import torch

from polo.core.elbo import ElboSettings
from polo.core.registry import ConfigError
from polo.policy.diffusion import DiffusionPolicy
from polo.policy.kinds import policy_class
from polo.policy.tiny import TinyModelConfig
from polo.policy.tokenizer import build_char_tokenizer
from polo.engines.sampler import sample
from polo.train.config import Model

TINY = Model(kind="diffusion", tiny=TinyModelConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64))


@pytest.fixture(scope="module")
def policy():
    torch.manual_seed(0)
    return DiffusionPolicy.build_tiny(TINY).eval()


def rows(policy):
    prompt_ids, prompt_mask = policy.encode_prompts(["12+34=", "5+5=", "12+34="])
    ids, mask = policy.encode_completions(["46", "10", "4"])
    return prompt_ids, prompt_mask, ids, mask


def test_kind_and_tokenizer(policy):
    assert policy_class("diffusion") is DiffusionPolicy
    assert policy.mask_token_id == 100 and policy.pad_token_id == policy.eos_token_id
    assert policy.tokenizer("ab")["input_ids"] == build_char_tokenizer()("ab")["input_ids"]  # causal ids unchanged
    with pytest.raises(ConfigError, match="mask token"):
        DiffusionPolicy(policy.model, build_char_tokenizer())


def test_old_ref_current_share_masks(policy):
    """Same weights: the behaviour (eval), reference (frozen copy) and training (train mode) ELBOs agree exactly,
    so the sequence ratio is 1; other weights change the values, never which positions are scored."""
    batch = rows(policy)
    old = policy.forward_logp(*batch)["logp"]
    ref = copy.deepcopy(policy).forward_logp(*batch)["logp"]
    policy.train()
    current = policy.forward_logp(*batch)["logp"]
    policy.eval()
    assert torch.equal(old, ref) and torch.equal(old, current)
    assert torch.exp(current.sum(1) - old.sum(1)).tolist() == [1.0, 1.0, 1.0]
    torch.manual_seed(1)
    other = DiffusionPolicy.build_tiny(TINY).forward_logp(*batch)["logp"]
    assert torch.equal(other != 0, old != 0) and not torch.allclose(other, old)
    assert (old[2, 2:] == 0).all() and (old[:2] != 0).any(1).all()  # padding after a response's eos scores nothing


def test_padding_and_batch_invariance(policy):
    prompt_ids, prompt_mask, ids, mask = rows(policy)
    full = policy.forward_logp(prompt_ids, prompt_mask, ids, mask)["logp"]
    pad = torch.zeros(3, 2, dtype=torch.long)
    wider = policy.forward_logp(torch.cat([pad, prompt_ids], 1), torch.cat([pad, prompt_mask], 1), ids, mask)["logp"]
    alone = policy.forward_logp(prompt_ids[1:2], prompt_mask[1:2], ids[1:2], mask[1:2])["logp"]
    torch.testing.assert_close(wider, full, atol=1e-5, rtol=0)
    torch.testing.assert_close(alone, full[1:2], atol=1e-5, rtol=0)


def test_entropy_and_refusals(policy):
    out = policy.forward_logp(*rows(policy), return_entropy="metric")
    assert out["entropy"].shape == out["logp"].shape and (out["entropy"][out["logp"] != 0] > 0).all()
    with pytest.raises(ConfigError, match="ELBO"):
        policy.forward_logp(*rows(policy), return_full=True)


def test_quadrature_setting_changes_estimate(policy):
    batch = rows(policy)
    base = policy.forward_logp(*batch)["logp"].sum(1)
    policy.elbo = ElboSettings("gauss-3", 2)
    try:
        three = policy.forward_logp(*batch)["logp"].sum(1)
    finally:
        policy.elbo = ElboSettings()
    assert not torch.allclose(base, three) and torch.isfinite(three).all()


def test_save_load_round_trip(policy, tmp_path):
    policy.save(tmp_path / "ck")
    loaded = DiffusionPolicy.load(tmp_path / "ck")
    assert loaded.mask_token_id == policy.mask_token_id and loaded.pad_token_id == policy.eos_token_id
    torch.testing.assert_close(loaded.forward_logp(*rows(policy))["logp"], policy.forward_logp(*rows(policy))["logp"])
    with pytest.raises(ConfigError, match="LoRA"):
        from polo.policy.lora import LoraConfig
        DiffusionPolicy.load(tmp_path / "ck", lora=LoraConfig(r=4))


def test_sampler_deterministic_and_well_formed(policy):
    prompt_ids, prompt_mask, _, _ = rows(policy)
    prompt_ids, prompt_mask = prompt_ids.repeat(4, 1), prompt_mask.repeat(4, 1)
    runs = [sample(policy, prompt_ids, prompt_mask, max_new_tokens=5, generator=torch.Generator().manual_seed(3),
                   steps=3) for _ in range(2)]
    a, b = runs
    assert torch.equal(a.response_ids, b.response_ids) and torch.equal(a.logp, b.logp)
    assert a.response_ids.shape == (12, 5) and (a.response_ids != policy.mask_token_id).all()
    eos = a.response_ids == policy.eos_token_id
    first = torch.where(eos.any(1), eos.long().argmax(1) + 1, 5)
    assert torch.equal(a.response_mask.sum(1), first) and torch.equal(a.truncated, ~eos.any(1))
    assert (a.response_ids[a.response_mask == 0] == policy.eos_token_id).all()
    rescored = policy.forward_logp(prompt_ids, prompt_mask, a.response_ids, a.response_mask)["logp"]
    torch.testing.assert_close(rescored, a.logp)  # old_logp: the ELBO of the sampled response, same masks
    greedy = [policy.own_sampler(prompt_ids, prompt_mask, max_new_tokens=5, greedy=True, remasking=r,
                                 generator=torch.Generator().manual_seed(s)).response_ids
              for r, s in (("low_confidence", 0), ("low_confidence", 1))]
    assert torch.equal(*greedy)
    random = policy.own_sampler(prompt_ids, prompt_mask, max_new_tokens=5, remasking="random",
                                generator=torch.Generator().manual_seed(0), return_entropy=True)
    assert random.entropy.shape == (12, 5)


@pytest.mark.parametrize("kwargs, match", [({"remasking": "left"}, "remasking='left'"), ({"top_k": 5}, "top_k"),
                                           ({"return_hidden": True}, "hidden")])
def test_sampler_refuses(policy, kwargs, match):
    ids, mask, _, _ = rows(policy)
    with pytest.raises(ConfigError, match=match):
        policy.own_sampler(ids, mask, max_new_tokens=3, **kwargs)


def test_demonstration_loss_trains():
    torch.manual_seed(0)
    policy = DiffusionPolicy.build_tiny(TINY)
    prompt_ids, prompt_mask, ids, mask = rows(policy)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-2)
    losses = []
    for _ in range(40):
        loss = policy.demonstration_loss(prompt_ids, prompt_mask, ids, mask, {})
        assert torch.isfinite(loss)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    assert sum(losses[-10:]) < 0.5 * sum(losses[:10])
