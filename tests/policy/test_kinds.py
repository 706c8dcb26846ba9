"""Policy kinds: ``model.kind`` names the policy class; per-row model inputs reach the sampler and the forward."""
import pytest
import torch

from polo.core.registry import ConfigError
from polo.policy.kinds import KINDS, policy_class
from polo.policy.policy import Policy
from polo.policy.tiny import TinyModelConfig
from polo.engines.sampler import sample
from polo.train.config import Model


def test_causal_kind_is_the_policy_and_unknown_kinds_are_named():
    assert policy_class("causal") is Policy
    with pytest.raises(ConfigError, match="'audio'.*causal"):
        policy_class("audio")
    with pytest.raises(ValueError, match="model.kind.*'audio'"):
        Model(kind="audio")
    assert set(KINDS) == {"causal", "diffusion", "vision"}


def test_causal_policy_has_no_row_inputs_and_its_demonstration_loss_is_the_token_mean_nll():
    torch.manual_seed(0)
    policy = Policy.build_tiny(Model(tiny=TinyModelConfig()))
    assert policy.prompt_inputs(["1+2="]) == {} and policy.own_sampler is None
    prompt_ids, prompt_mask = policy.encode_prompts(["1+2=", "3+4="])
    ids, mask = policy.encode_completions(["3", "77"])
    logp = policy.forward_logp(prompt_ids, prompt_mask, ids, mask)["logp"]
    loss = policy.demonstration_loss(prompt_ids, prompt_mask, ids, mask, {})
    assert torch.allclose(loss, -(logp * mask).sum() / mask.sum())


def test_sampler_settings_of_an_own_sampler_are_refused_by_polos_sampler():
    torch.manual_seed(0)
    policy = Policy.build_tiny(Model())
    ids, mask = policy.encode_prompts(["1+2="])
    with pytest.raises(TypeError, match="steps"):
        sample(policy, ids, mask, max_new_tokens=2, steps=4)


def test_rows_with_their_own_inputs_do_not_share_a_prefill():
    """With ``inputs`` every row is prefilled on its own; the samples equal the shared-prefill ones (same model)."""
    torch.manual_seed(0)
    policy = Policy.build_tiny(Model()).eval()
    ids, mask = policy.encode_prompts(["1+2=", "1+2=", "30+4="])
    calls = []

    class Recording(type(policy.decoder())):
        def prefill(self, distinct, **inputs):
            calls.append((len(distinct[0]), set(inputs)))
            return super().prefill(distinct)

    policy.decoder = lambda: Recording(policy.model, policy.hf_model, policy.autocast)
    shared = sample(policy, ids, mask, max_new_tokens=4, generator=torch.Generator().manual_seed(1))
    own = sample(policy, ids, mask, max_new_tokens=4, generator=torch.Generator().manual_seed(1),
                 inputs={"tag": torch.zeros(3)})
    assert calls == [(2, set()), (3, {"tag"})]
    assert torch.equal(shared.response_ids, own.response_ids)


def test_a_recipe_whose_engine_cannot_roll_out_its_policy_kind_is_refused():
    from polo.train.config import load_recipe

    with pytest.raises(ConfigError, match="engine 'single_turn' rolls out causal or vision policies.*'diffusion'"):
        load_recipe("grpo", ["model.kind=diffusion"])
    with pytest.raises(ConfigError, match="engine 'vllm' rolls out causal policies.*'vision'"):
        load_recipe("grpo", ["model.kind=vision", "engine.name=vllm"])


@pytest.mark.parametrize("kind", ["diffusion", "vision"])
def test_a_critic_is_refused_for_a_policy_without_a_causal_trunk(kind):
    from polo.policy.policy import ValueModel

    torch.manual_seed(0)
    policy = policy_class(kind).build_tiny(Model(kind=kind))
    with pytest.raises(ConfigError, match="critic copies a causal LM's trunk"):
        ValueModel.from_policy(policy)


@pytest.mark.parametrize("kind", ["causal", "diffusion", "vision"])
def test_every_kind_saves_and_loads_through_its_auto_class(kind, tmp_path):
    torch.manual_seed(0)
    policy = policy_class(kind).build_tiny(Model(kind=kind))
    policy.save(tmp_path)
    loaded = policy_class(kind).load(tmp_path)
    assert type(loaded) is type(policy)
    for (name, a), (_, b) in zip(policy.state_dict().items(), loaded.state_dict().items()):
        assert torch.equal(a, b), name
