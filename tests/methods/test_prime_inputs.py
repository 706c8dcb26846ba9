"""The ``process_rewards`` provider: β·(log π_φ − log π_ref) per response token under the implicit PRM, and the
reference's ``ref_logp`` that the PRM's loss reads."""
import torch

from polo.core.batch import RolloutBatch
from polo.policy.reference import frozen_copy
from polo.roles.base import ROLES
from polo.policy.policy import build_tiny_policy
from polo.policy.tiny import TinyModelConfig
from polo.engines.base import Rollouts
from polo.inputs.base import PROVIDERS, ProviderContext


def test_process_rewards_under_the_prm_before_its_update():
    torch.manual_seed(0)
    policy = build_tiny_policy(TinyModelConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64))
    prm = ROLES.build({"name": "implicit_prm", "beta": 0.1}, "roles.implicit_prm").build(policy)
    models = {"reference": frozen_copy(policy), "implicit_prm": prm}
    prompt_ids, prompt_mask = policy.encode_prompts(["12+3=", "4*2=", "7-7="])
    response_ids, response_mask = policy.encode_completions(["15", "8 8", "0"])
    batch = RolloutBatch(prompt_ids, prompt_mask, response_ids, response_mask, torch.tensor([0, 1, 2]), torch.zeros(3))
    provider = PROVIDERS.get("process_rewards")
    assert provider.roles == {"implicit_prm", "reference"}
    context = ProviderContext(policy, models, None, None, {}, {"process_rewards"}, temperature=0.8)

    got = provider(context, Rollouts(batch, ["15", "8 8", "0"], []))
    assert set(got) == {"process_rewards", "ref_logp"}
    ref = models["reference"].forward_logp(prompt_ids, prompt_mask, response_ids, response_mask, temperature=0.8)
    assert torch.equal(got["ref_logp"], ref["logp"])
    # π_φ starts as the policy: up to kernel round-off (a trainable copy may take other kernels), every r_t is 0
    torch.testing.assert_close(got["process_rewards"], torch.zeros_like(ref["logp"]), atol=1e-6, rtol=0)

    with torch.no_grad():  # a PRM that has moved: r_t = β·(log π_φ − log π_ref), 0 on masked tokens
        for p in prm.parameters():
            p.add_(0.05 * torch.randn_like(p))
    got = provider(context, Rollouts(batch, ["15", "8 8", "0"], []))
    phi = prm.lm.forward_logp(prompt_ids, prompt_mask, response_ids, response_mask, temperature=0.8)["logp"]
    expected = 0.1 * (phi - ref["logp"]) * response_mask
    torch.testing.assert_close(got["process_rewards"], expected, atol=1e-6, rtol=0)
    assert got["process_rewards"].abs().max() > 1e-3 and not got["process_rewards"].requires_grad
    assert (got["process_rewards"][response_mask == 0] == 0).all()
