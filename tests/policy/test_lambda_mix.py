"""LambdaMix's mixed-adapter policy: merge, per-row mixing, gradients, frozen base, save/load, resume."""
import copy

import pytest
import torch
from transformers import AutoModelForCausalLM

from polo.core.registry import ConfigError
from polo.methods.lambdamix.policy import Adapter, LambdaMix, LambdaMixPolicy
from polo.policy.lora import LoraConfig, apply_lora
from polo.policy.policy import build_tiny_policy
from polo.policy.tiny import TinyModelConfig
from polo.engines.sampler import sample
from polo.train.config import load_recipe
from polo.train.trainer import Trainer, resume

SMALL = TinyModelConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64)


def mixed(objectives=2, rank=4, alpha=8.0, seed=0, b_std=0.2):
    """A LambdaMixPolicy on a fresh small model with non-zero B (so that λ matters), in float64."""
    torch.manual_seed(seed)
    role = LambdaMix(objectives=objectives, rank=rank, alpha=alpha)
    base = build_tiny_policy(SMALL)
    adapters = role.build(base)
    if b_std:
        for a in adapters:
            torch.nn.init.normal_(a.B, std=b_std)
    return role.wrap(base, adapters).double()


def prompts(policy):
    ids, mask = policy.encode_prompts(["12+34=", "5+6=", "12+34="])
    rids, rmask = policy.encode_completions(["46", "11", "4"])
    return ids, mask, rids, rmask


LAM = torch.tensor([[0.7, 0.3], [0.1, 0.9], [0.0, 1.0]])


def test_merge_worked_example():
    """§14(e): B_1A_1 = [[1,1],[0,0]], B_2A_2 = [[0,0],[1,1]], α/r = 2, λ = (0.7, 0.3) → ΔW = [[1.4,1.4],[0.6,0.6]]."""
    adapter = Adapter(objectives=2, rank=1, d_in=2, d_out=2)
    with torch.no_grad():
        adapter.A.copy_(torch.tensor([[[1.0, 1.0]], [[1.0, 1.0]]]))
        adapter.B.copy_(torch.tensor([[[1.0], [0.0]], [[0.0], [1.0]]]))
    assert torch.allclose(2 * adapter.delta(torch.tensor([0.7, 0.3])), torch.tensor([[1.4, 1.4], [0.6, 0.6]]))

    policy = mixed(rank=1, alpha=2.0, b_std=0).float()  # the same on a model's layer, via merged_state_dict
    name, first = policy.names[0], policy.adapters[0]
    with torch.no_grad():
        first.A.zero_()
        first.A[:, 0, :2] = 1.0
        first.B[0, 0, 0], first.B[1, 1, 0] = 1.0, 1.0
    base, merged = policy.base_state_dict()[f"{name}.weight"], policy.merged_state_dict([0.7, 0.3])[f"{name}.weight"]
    delta = merged - base
    assert torch.allclose(delta[:2, :2], torch.tensor([[1.4, 1.4], [0.6, 0.6]]))
    assert delta.abs().sum() == pytest.approx(4.0)  # nothing else changed
    assert set(policy.merged_state_dict([0.5, 0.5])) == set(policy.base_state_dict())


def test_per_row_mixture_equals_merged_weights():
    policy = mixed()
    ids, mask, rids, rmask = prompts(policy)
    together = policy.forward_logp(ids, mask, rids, rmask, lam=LAM)["logp"]
    for i in range(3):
        alone = policy.merged(LAM[i]).forward_logp(ids[i:i + 1], mask[i:i + 1], rids[i:i + 1], rmask[i:i + 1])["logp"]
        assert torch.allclose(alone, together[i:i + 1], atol=1e-6)
    assert not torch.allclose(together[0], together[2])  # same prompt and response, different λ
    uniform = policy.forward_logp(ids, mask, rids, rmask)["logp"]  # no λ: the uniform mixture
    assert torch.allclose(uniform, policy.forward_logp(ids, mask, rids, rmask, lam=torch.full((3, 2), 0.5))["logp"])
    with pytest.raises(ValueError, match="NaN"):
        policy.forward_logp(ids, mask, rids, rmask, lam=torch.full((3, 2), float("nan")))
    with pytest.raises(ValueError, match="shape"):
        policy.forward_logp(ids, mask, rids, rmask, lam=torch.full((2, 2), 0.5))


def test_sampler_mixes_per_row(f32):
    """Decoding keeps each row's λ (finished rows leave the batch): the sampler's log-probs equal the forward's."""
    policy = mixed()
    ids, mask, _, _ = prompts(policy)
    ids, mask, lam = ids.repeat(4, 1), mask.repeat(4, 1), LAM.repeat(4, 1)
    out = sample(policy, ids, mask, max_new_tokens=6, generator=torch.Generator().manual_seed(0), inputs={"lam": lam})
    assert out.response_mask.sum(1).unique().numel() > 1  # rows finished at different steps
    again = policy.forward_logp(ids, mask, out.response_ids, out.response_mask, lam=lam)["logp"]
    with policy.mixing(lam.double()):
        atol = f32.logp_atol(policy, ids, mask, out.response_ids, out.response_mask)
    assert torch.allclose(out.logp, again, atol=atol)
    plain = sample(policy, ids, mask, max_new_tokens=6, generator=torch.Generator().manual_seed(0))  # shared prefill
    uniform = policy.forward_logp(ids, mask, plain.response_ids, plain.response_mask)["logp"]
    with policy.mixing(torch.full_like(lam, 0.5)):
        atol = f32.logp_atol(policy, ids, mask, plain.response_ids, plain.response_mask)
    assert torch.allclose(plain.logp, uniform, atol=atol)


def test_gradients_reach_adapters_scaled_by_lambda():
    """With B = 0 (as built) the model is the base for every λ, so dL/dB_m = λ_m · (dL/dB_m at λ_m = 1)."""
    policy = mixed(b_std=0)
    ids, mask, rids, rmask = (x[:1] for x in prompts(policy))

    def grads(lam):
        policy.zero_grad()
        policy.forward_logp(ids, mask, rids, rmask, lam=torch.tensor([lam], dtype=torch.float64))["logp"].sum().backward()
        return [a.B.grad.clone() for a in policy.adapters]

    one = grads([1.0, 1.0])
    mix = grads([0.7, 0.3])
    for full, part in zip(one, mix):
        assert full.abs().sum() > 0
        assert torch.allclose(part[0], 0.7 * full[0]) and torch.allclose(part[1], 0.3 * full[1])
    corner = grads([1.0, 0.0])
    assert all(g[1].abs().sum() == 0 for g in corner)  # objective 2's adapter gets nothing at λ = e_1


def test_base_frozen_only_adapters_train():
    policy = mixed()
    trainable = {n for n, p in policy.named_parameters() if p.requires_grad}
    assert trainable and all(".adapter." in n for n in trainable)
    assert len(trainable) == 2 * len(policy.names)
    before = {k: v.clone() for k, v in policy.base_state_dict().items()}
    opt = torch.optim.SGD([p for p in policy.parameters() if p.requires_grad], lr=0.1)
    ids, mask, rids, rmask = prompts(policy)
    policy.forward_logp(ids, mask, rids, rmask, lam=LAM)["logp"].sum().backward()
    opt.step()
    assert all(torch.equal(before[k], v) for k, v in policy.base_state_dict().items())
    assert policy.state_dict().keys() >= {f"model.{n}.adapter.A" for n in policy.names}  # checkpointed with the policy


def test_save_and_load(tmp_path):
    policy = mixed().float()
    ids, mask, rids, rmask = prompts(policy)
    want = policy.forward_logp(ids, mask, rids, rmask, lam=LAM)["logp"]
    twin = copy.deepcopy(policy)  # asynchronous rollouts sample from a copy: its layers share the copy's λ
    assert torch.allclose(twin.forward_logp(ids, mask, rids, rmask, lam=LAM)["logp"], want)
    policy.save(tmp_path / "mix")
    again = LambdaMixPolicy.load_mixture(tmp_path / "mix")
    assert torch.allclose(again.forward_logp(ids, mask, rids, rmask, lam=LAM)["logp"], want, atol=1e-6)
    policy.save(tmp_path / "merged", merge_lora=True)  # a plain model at the uniform mixture
    plain = AutoModelForCausalLM.from_pretrained(tmp_path / "merged")
    assert torch.allclose(plain.state_dict()["model.layers.0.self_attn.q_proj.weight"],
                          policy.merged_state_dict([0.5, 0.5])["model.layers.0.self_attn.q_proj.weight"])


def test_bad_settings():
    lora = build_tiny_policy(SMALL)
    with pytest.raises(ConfigError, match="model.lora.r=0"):
        LambdaMix().build(type(lora)(apply_lora(lora.model, LoraConfig(r=2)), lora.tokenizer))
    base = build_tiny_policy(SMALL)
    with pytest.raises(ConfigError, match="matches no linear"):
        LambdaMix(target_modules=["nope"]).build(base)
    with pytest.raises(ValueError, match="objectives"):
        LambdaMix(objectives=1)


def _deterministic(rows):
    return [{k: v for k, v in r.items() if not k.startswith(("time/", "perf/", "elapsed"))} for r in rows]


def test_run_resumes_bit_for_bit(tiny, tmp_path):
    """The adapters are in the policy's checkpoint and λ comes from the run's generator: a resumed run matches."""
    overrides = [*tiny, "train.save_every=1", "train.eval_every=100", "optim.schedule=constant"]
    full = Trainer(load_recipe("lambdamix", overrides), tmp_path / "full", log=lambda *_: None).run()
    Trainer(load_recipe("lambdamix", [*overrides, "train.steps=2"]), tmp_path / "cut", log=lambda *_: None).run()
    rest = resume(tmp_path / "cut", log=lambda *_: None, overrides=["train.steps=3"]).run()
    assert rest[-1]["step"] == 3 and full[-1]["rewards/shortness/mean"] == rest[-1]["rewards/shortness/mean"]
    assert _deterministic(full[-1:]) == _deterministic(rest[-1:])
