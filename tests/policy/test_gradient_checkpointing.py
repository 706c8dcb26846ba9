"""Gradient checkpointing (``Policy.enable_gradient_checkpointing``): the same gradients with less memory, for
the policy, a LoRA policy and the critic; the KV-cached sampler is untouched (it runs in eval mode)."""
import pytest
import torch

from polo.policy import TinyModelConfig, ValueModel
from polo.policy.lora import LoraConfig, apply_lora
from polo.policy.policy import Policy
from polo.policy.prefix import CachedDecoder, drops_cache
from polo.policy.tiny import build_tiny_model
from polo.policy.tokenizer import build_char_tokenizer
from polo.engines.sampler import sample

SMALL = TinyModelConfig(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64)
PROMPTS = [p for p in ["2+3=", "17+25=", "4+4="] for _ in range(3)]  # repeated: the shared-prompt path


def build(lora: bool = False, checkpointing: bool = False) -> Policy:
    """The same float64 weights every call (two paths through the model are compared: see conftest's Float32)."""
    torch.manual_seed(0)
    tokenizer = build_char_tokenizer()
    model = build_tiny_model(SMALL, tokenizer).double()
    if lora:
        model = apply_lora(model, LoraConfig(r=4, alpha=8))
        for name, p in model.named_parameters():  # non-zero adapters, so their gradients are not trivial
            if "lora_B" in name:
                torch.nn.init.normal_(p, std=0.1, generator=torch.Generator().manual_seed(1))
    policy = Policy(model, tokenizer)
    if checkpointing:
        policy.enable_gradient_checkpointing()
    return policy


def batch(policy: Policy):
    p_ids, p_mask = policy.encode_prompts(PROMPTS)
    g = torch.Generator().manual_seed(2)
    r_ids = torch.randint(3, 20, (len(PROMPTS), 5), generator=g)
    r_mask = (torch.arange(5) < torch.randint(1, 6, (len(PROMPTS), 1), generator=g)).long()
    return p_ids, p_mask, r_ids, r_mask


def flat_grad(module: torch.nn.Module, loss: torch.Tensor) -> torch.Tensor:
    params = [p for p in module.parameters() if p.requires_grad]
    return torch.cat([g.reshape(-1) for g in torch.autograd.grad(loss, params)])


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


def count_layer_calls(policy: Policy) -> list[int]:
    """A counter of the first decoder layer's forwards (a checkpointed layer starts again in the backward; a
    pre-hook, as the recompute stops once it has what the backward needs)."""
    calls = [0]
    layer = policy.hf_model.model.layers[0]
    layer.register_forward_pre_hook(lambda *args: calls.__setitem__(0, calls[0] + 1))
    return calls


def policy_gradient(policy: Policy) -> torch.Tensor:
    policy.train()
    p_ids, p_mask, r_ids, r_mask = batch(policy)
    logp = policy.forward_logp(p_ids, p_mask, r_ids, r_mask)["logp"]
    weights = torch.randn(logp.shape, generator=torch.Generator().manual_seed(3))
    return flat_grad(policy, (logp * weights).sum())


@pytest.mark.parametrize("lora", [False, True])
def test_checkpointed_policy_gradient_equals_the_plain_one(lora):
    """Recompute instead of storing: the same gradient. Without checkpointing the G samples share one prompt
    forward, with it the forward is plain (the layers drop caches), so the two differ by float32's rounding of
    the logits in forward_logp only (float64 model, relative error ~1e-8; test_updater_standalone's bound)."""
    plain = policy_gradient(build(lora))
    checkpointed = build(lora, checkpointing=True)
    calls = count_layer_calls(checkpointed)
    grad = policy_gradient(checkpointed)
    assert calls[0] == 2  # forward + recompute in the backward: checkpointing is really on
    assert plain.norm() > 0
    assert relative_error(grad, plain) < 1e-6


def test_checkpointed_critic_gradient_equals_the_plain_one():
    values = []
    for checkpointing in (False, True):
        policy = build(checkpointing=checkpointing)
        critic = ValueModel.from_policy(policy).train()  # a copy of the trunk: checkpointed like the policy
        assert drops_cache(critic.trunk) == checkpointing
        torch.nn.init.normal_(critic.head.weight, generator=torch.Generator().manual_seed(4))
        v = critic(*batch(policy))
        values.append((v.dtype, flat_grad(critic, (v**2).sum())))
    assert values[0][0] == values[1][0] == torch.float32
    assert relative_error(values[1][1], values[0][1]) < 1e-6


def test_sampler_keeps_its_kv_cache_under_checkpointing():
    """The sampler runs in eval mode, where checkpointing is off: same tokens and log-probs as without it; in
    training mode the cached decoder refuses to start instead of decoding without its cache."""
    outs = []
    for checkpointing in (False, True):
        policy = build(checkpointing=checkpointing).eval()
        p_ids, p_mask, _, _ = batch(policy)
        outs.append(sample(policy, p_ids, p_mask, max_new_tokens=6, generator=torch.Generator().manual_seed(5)))
    assert torch.equal(outs[0].response_ids, outs[1].response_ids)
    assert torch.equal(outs[0].logp, outs[1].logp)
    policy.train()
    with pytest.raises(RuntimeError, match="call policy.eval"):
        CachedDecoder(policy.model, policy.hf_model)
