import pytest
import torch

import polo.core.advantages  # noqa: F401  (registers)
import polo.core.aggregation  # noqa: F401
import polo.core.divergences  # noqa: F401
import polo.core.losses  # noqa: F401
from polo.core.registry import ADVANTAGES, AGGREGATIONS, DIVERGENCES, POLICY_LOSSES, ConfigError

REGISTRIES = [ADVANTAGES, POLICY_LOSSES, DIVERGENCES, AGGREGATIONS]
CORE = {
    ADVANTAGES: {"grpo", "dr_grpo", "rloo", "gae", "reinforce_pp", "reinforce_pp_baseline"},
    POLICY_LOSSES: {"ppo_clip", "gspo", "cispo", "reinforce"},
    DIVERGENCES: {"k1", "k2", "k3"},
    AGGREGATIONS: {"token_mean", "seq_mean_token_mean", "seq_mean_token_sum", "seq_mean_token_sum_norm"},
}


@pytest.mark.parametrize("registry", REGISTRIES, ids=lambda r: r.kind)
def test_core_components_registered_and_documented(registry):
    assert CORE[registry] <= set(registry.names())
    for name in CORE[registry]:
        cls = registry.get(name)
        assert cls.spec.startswith("single_turn_core.md §") and cls.provenance == "CODE" and cls.__doc__
        registry.build(name)  # defaults are valid


def test_unknown_name_lists_valid_names():
    with pytest.raises(ConfigError, match="unknown advantage 'grpoo'.*dr_grpo, gae, .*grpo"):
        ADVANTAGES.build("grpoo")


def test_unknown_or_mistyped_hyperparameter_names_the_key():
    with pytest.raises(ConfigError, match=r"policy_loss\.clip_hgh"):
        POLICY_LOSSES.build({"name": "ppo_clip", "clip_hgh": 0.28})
    with pytest.raises(ConfigError, match=r"advantage\.scale_by_std"):
        ADVANTAGES.build({"name": "grpo", "scale_by_std": "sometimes"})


def test_needs_follow_hyperparameters():
    assert ADVANTAGES.build("grpo").needs() == set()
    assert POLICY_LOSSES.build("ppo_clip").needs() == {"old_logp"}
    assert DIVERGENCES.build("k3").needs() == {"ref_logp"}
    assert ADVANTAGES.build({"name": "reinforce_pp_baseline", "kl_coef": 0.0}).needs() == set()
    assert ADVANTAGES.build({"name": "gae", "kl_coef": 0.001}).needs() == {"values", "old_logp", "ref_logp"}


def test_hyperparameters_round_trip():
    est = ADVANTAGES.build({"name": "gae", "lam": 0.95, "whiten": False})
    assert est.model_dump() == {"kl_coef": 0.0, "kl_estimator": "k1", "gamma": 1.0, "lam": 0.95, "whiten": False}
    assert torch.is_tensor(ADVANTAGES.build("grpo").sequence_advantage(torch.ones(2), torch.zeros(2, dtype=torch.long)))
