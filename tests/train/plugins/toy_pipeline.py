"""A plugin that extends the pipeline from outside the package: an engine, a model role, an input provider
that needs that role, and a policy loss that reads the input. Loaded by tests/train/test_plugin_pipeline.py."""
import torch

from polo.core.losses.base import LossOutput, PolicyLoss, clipped_surrogate, ratio
from polo.core.registry import POLICY_LOSSES
from polo.core.segment import masked_mean
from polo.policy.reference import frozen_copy
from polo.roles.base import ROLES, Role
from polo.engines.base import ENGINES
from polo.inputs.base import register_provider
from polo.engines.single_turn import SingleTurn

CALLS = {"engine": 0, "role_built": 0, "provider": 0, "loss": 0}


@ENGINES.register("toy_engine")
class ToyEngine(SingleTurn):
    """Single-turn sampling that counts its calls and marks every row it produced."""

    def rollout(self, policy, examples, prompt_index, generator, **kwargs):
        CALLS["engine"] += 1
        out = super().rollout(policy, examples, prompt_index, generator, **kwargs)
        out.batch.extras["toy_engine_row"] = torch.ones(out.batch.batch_size)
        return out


@ROLES.register("toy_anchor")
class ToyAnchor(Role):
    """A frozen copy of the initial policy, kept in the checkpoint."""

    def build(self, policy):
        CALLS["role_built"] += 1
        return frozen_copy(policy)


@register_provider("toy_anchor_logp", roles={"toy_anchor"})
@torch.no_grad()
def toy_anchor_logp(ctx, rollouts):
    """The anchor's log-probs of the sampled responses."""
    CALLS["provider"] += 1
    b = rollouts.batch
    assert b.extras["toy_engine_row"].all()
    return {"toy_anchor_logp": ctx.models["toy_anchor"].forward_logp(
        b.prompt_ids, b.prompt_mask, b.response_ids, b.response_mask)["logp"]}


@POLICY_LOSSES.register("toy_anchored_clip")
class ToyAnchoredClip(PolicyLoss):
    """PPO clip plus ``coef·(logp − anchor_logp)²`` on every token."""

    requires = frozenset({"old_logp", "toy_anchor_logp"})
    coef: float = 0.1

    def __call__(self, logp, batch):
        CALLS["loss"] += 1
        mask = batch.mask
        u, metrics = clipped_surrogate(ratio(logp, batch.old_logp), batch.advantages, mask, 0.2, 0.2)
        gap = logp - batch.extras["toy_anchor_logp"]
        metrics["anchor_gap"] = masked_mean(gap.detach().abs(), mask)
        return LossOutput(u + self.coef * gap**2, metrics)
