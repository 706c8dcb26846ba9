import re

import pytest
import torch

import polo.core.advantages  # noqa: F401  (registers)
import polo.core.aggregation  # noqa: F401
import polo.core.divergences  # noqa: F401
import polo.core.losses  # noqa: F401
from polo.core.registry import (
    ADVANTAGES, AGGREGATIONS, CREDIT, DIVERGENCES, OPTIMIZER_HOOKS, POLICY_LOSSES, SHAPING, Component, ConfigError,
)

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
        assert PAPER.match(cls.paper) and cls.provenance == "CODE" and cls.__doc__
        registry.build(name)  # defaults are valid


PAPER = re.compile(r"^\S.* \((arXiv:\d{4}\.\d{4,5}|.*(arXiv id not found|no arXiv id).*)\)$")
"""``Title (arXiv:XXXX.XXXXX)``, or a title with a parenthesis that says why there is no arXiv id."""
ALL_REGISTRIES = [ADVANTAGES, POLICY_LOSSES, DIVERGENCES, AGGREGATIONS, SHAPING, CREDIT, OPTIMIZER_HOOKS]
ALL = [(r, name) for r in ALL_REGISTRIES for name in r.names()]


@pytest.mark.parametrize("registry, name", ALL, ids=[f"{r.kind}:{n}" for r, n in ALL])
def test_components_cite_papers_not_spec_sections(registry, name):
    cls = registry.get(name)
    assert "spec" not in cls.__dict__ and not hasattr(Component, "spec")
    assert cls.paper == "" or PAPER.match(cls.paper), cls.paper
    assert "§" not in (cls.__doc__ or "") and ".md" not in (cls.__doc__ or "")


def test_paper_citations_of_well_known_methods():
    assert ADVANTAGES.get("grpo").paper.endswith("(arXiv:2402.03300)")
    assert ADVANTAGES.get("gae").paper.endswith("(arXiv:1506.02438)")
    assert POLICY_LOSSES.get("ppo_clip").paper == "Proximal Policy Optimization Algorithms (arXiv:1707.06347)"
    assert ADVANTAGES.get("info_gae").paper == "Information-Time Proximal Policy Optimization (arXiv id not found)"


def test_unknown_name_lists_valid_names():
    with pytest.raises(ConfigError, match="unknown advantage 'grpoo'.*dr_grpo, .*gae, .*grpo"):
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
