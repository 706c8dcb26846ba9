import copy

import pytest
import torch
from pydantic import ValidationError

from polo.policy import LoraConfig, Policy, TinyModelConfig, ValueModel, apply_lora, frozen_copy
from polo.policy.policy import build_tiny_policy
from polo.engines.sampler import sample

SMALL = TinyModelConfig(hidden_size=32, num_heads=2, intermediate_size=64)
PROMPTS = ["2+3=", "a", "what is 12*7?"]
COMPLETIONS = ["5", "bb b", "84\n"]


@pytest.fixture(scope="module")
def policy():
    torch.manual_seed(0)
    return build_tiny_policy(SMALL)


def batch(policy):
    return (*policy.encode_prompts(PROMPTS), *policy.encode_completions(COMPLETIONS))


def test_encoding_padding_and_decode(policy):
    ids, mask = policy.encode_prompts(PROMPTS)
    assert mask[:, -1].all() and mask.sum(1).tolist() == [len(p) + 1 for p in PROMPTS]  # left-padded, with bos
    assert (ids[mask.bool()] != policy.pad_token_id).all()
    assert (ids.gather(1, (mask.argmax(1))[:, None]) == policy.tokenizer.bos_token_id).all()
    r_ids, r_mask = policy.encode_completions(COMPLETIONS)
    assert r_mask[:, 0].all() and r_mask.sum(1).tolist() == [len(c) + 1 for c in COMPLETIONS]  # right-padded, + eos
    assert (r_ids.gather(1, r_mask.sum(1, keepdim=True) - 1) == policy.eos_token_id).all()
    assert policy.decode(r_ids, r_mask) == COMPLETIONS


def test_forward_logp_outputs_and_left_padding_invariance(policy, f32):
    policy = copy.deepcopy(policy).double()  # alone vs in a padded batch: two paths, compared in float64
    p_ids, p_mask, r_ids, r_mask = batch(policy)
    out = policy.forward_logp(p_ids, p_mask, r_ids, r_mask, temperature=0.7, return_entropy=True, hidden_layer=-1)
    assert out["logp"].shape == out["entropy"].shape == r_ids.shape
    assert out["hidden_states"].shape == (3, p_ids.shape[1] + r_ids.shape[1], SMALL.hidden_size)
    assert (out["logp"][r_mask == 0] == 0).all() and (out["logp"][r_mask == 1] < 0).all()
    assert (out["entropy"][r_mask == 1] > 0).all() and torch.isfinite(out["hidden_states"]).all()
    atol = f32.logp_atol(policy, p_ids, p_mask, r_ids, r_mask, temperature=0.7)  # ≈ 7e-6 (measured ≤ 5e-7)
    for row in range(3):  # each row alone (no padding) gives the same log-probs as in the padded batch
        n, m = int(p_mask[row].sum()), int(r_mask[row].sum())
        alone = policy.forward_logp(p_ids[row:row + 1, -n:], p_mask[row:row + 1, -n:], r_ids[row:row + 1, :m],
                                    r_mask[row:row + 1, :m], temperature=0.7)
        torch.testing.assert_close(alone["logp"][0], out["logp"][row, :m], atol=atol, rtol=0)


def test_value_model_shapes_masking_and_own_parameters(policy, f32):
    p_ids, p_mask, r_ids, r_mask = batch(policy)
    critic = ValueModel.from_policy(policy)
    own = {p.data_ptr() for p in critic.parameters()}
    assert own.isdisjoint(p.data_ptr() for p in policy.parameters())
    assert all(p.requires_grad for p in critic.parameters())
    torch.nn.init.normal_(critic.head.weight)
    values = critic(p_ids, p_mask, r_ids, r_mask)
    assert values.shape == r_ids.shape and (values[r_mask == 0] == 0).all() and (values[r_mask == 1] != 0).all()
    changed = r_ids.clone()
    changed[:, 1] = 50  # V(s_t) sees tokens before t only: changing token 1 leaves V(s_0), V(s_1) alone
    after = critic(p_ids, p_mask, changed, r_mask)
    # the same kernels on the same shapes (later tokens only meet exact 0 attention weights): equal up to
    # a few ulps of max|V| (measured: bitwise equal); so are the clone's values below
    same = f32.atol(values.abs().max())
    torch.testing.assert_close(after[:, :2], values[:, :2], atol=same, rtol=0)
    assert (after[1, 2:4] != values[1, 2:4]).all()
    values.sum().backward()
    assert critic.head.weight.grad is not None and not any(p.grad is not None for p in policy.parameters())
    clone = ValueModel.from_policy(policy)
    clone.load_state_dict(critic.state_dict())
    torch.testing.assert_close(clone(p_ids, p_mask, r_ids, r_mask), values.detach(), atol=same, rtol=0)


def same_computation(a, b, f32):
    """The same float32 computation twice (equal weights, kernels and shapes): equal up to a few ulps of the
    largest magnitude (measured: bitwise equal)."""
    torch.testing.assert_close(a, b, atol=f32.atol(b.detach().abs().max()), rtol=0)


def test_frozen_copy(policy, f32):
    ref = frozen_copy(policy)
    assert not ref.training and not any(p.requires_grad for p in ref.parameters())
    assert any(p.requires_grad for p in policy.parameters())
    same_computation(ref.forward_logp(*batch(policy))["logp"], policy.forward_logp(*batch(policy))["logp"], f32)


def test_save_and_load_round_trip(policy, tmp_path, f32):
    policy.save(tmp_path)
    again = Policy.load(tmp_path)
    assert again.stop_token_ids == policy.stop_token_ids and again.pad_token_id == policy.pad_token_id
    same_computation(again.forward_logp(*batch(again))["logp"], policy.forward_logp(*batch(policy))["logp"], f32)


def test_missing_checkpoint_folder_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        Policy.load(tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match="no config.json"):
        Policy.load(tmp_path)


def test_configs_reject_unknown_keys():
    with pytest.raises(ValidationError):
        TinyModelConfig(hidden=3)
    with pytest.raises(ValidationError):
        LoraConfig(rank=3)
    assert apply_lora(object, LoraConfig()) is object  # r = 0: no adapter, peft not needed


def test_qwen2_architecture():
    torch.manual_seed(0)
    qwen = build_tiny_policy(SMALL.model_copy(update={"arch": "qwen2"}))
    assert type(qwen.model).__name__ == "Qwen2ForCausalLM"
    assert qwen.forward_logp(*batch(qwen))["logp"].shape == (3, 5)


def test_lora_trains_only_adapters_and_round_trips(policy, tmp_path, f32):
    pytest.importorskip("peft")
    torch.manual_seed(0)
    lora = Policy(apply_lora(build_tiny_policy(SMALL).model, LoraConfig(r=4)), policy.tokenizer)
    trainable = [n for n, p in lora.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    with torch.no_grad():
        for n, p in lora.named_parameters():
            if "lora_B" in n:
                p.normal_()
    lora.save(tmp_path)
    again = Policy.load(tmp_path)
    assert [n for n, p in again.named_parameters() if p.requires_grad] == trainable
    same_computation(again.forward_logp(*batch(again))["logp"], lora.forward_logp(*batch(lora))["logp"], f32)
    again.double()  # sampler vs forward: two paths through the model, compared in float64 (Float32)
    ids, mask = again.encode_prompts(PROMPTS)
    out = sample(again, ids, mask, max_new_tokens=6, generator=torch.Generator().manual_seed(0))
    atol = f32.logp_atol(again, ids, mask, out.response_ids, out.response_mask)  # ≈ 7e-6 (measured ≤ 1e-6)
    torch.testing.assert_close(again.forward_logp(ids, mask, out.response_ids, out.response_mask)["logp"], out.logp,
                               atol=atol, rtol=0)


def test_entropy_as_a_metric_has_no_autograd_history(policy, f32):
    out = policy.forward_logp(*batch(policy), return_entropy="metric")
    assert out["logp"].requires_grad and not out["entropy"].requires_grad
    with_grad = policy.forward_logp(*batch(policy), return_entropy=True)["entropy"]
    assert with_grad.requires_grad
    same_computation(out["entropy"], with_grad.detach(), f32)


def test_presets_size_the_builtin_model_and_keys_override_them():
    from polo.core.registry import ConfigError
    from polo.train.config import load_recipe

    base = load_recipe("grpo", ["model.tiny.preset=base"]).model.tiny
    assert (base.hidden_size // base.num_heads, base.num_layers, base.max_position_embeddings) == (64, 6, 512)
    assert load_recipe("grpo", ["model.tiny.preset=base", "model.tiny.num_layers=8"]).model.tiny.num_layers == 8
    default = load_recipe("grpo").model.tiny
    assert (default.preset, default.hidden_size, default.num_layers) == ("tiny", 128, 2)
    again = type(base).model_validate(base.model_dump())  # a run folder's config reads back to the same size
    assert again == base
    with pytest.raises(ConfigError, match="preset"):
        load_recipe("grpo", ["model.tiny.preset=huge"])
