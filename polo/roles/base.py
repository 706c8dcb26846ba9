"""Model roles: the models besides the policy that a run may need (reference, critics, masking policy, and
later teachers and judges). A role is a registered component whose fields are its settings (``roles.NAME``
in a recipe); the trainer builds a role's model only when the chosen engine or an input provider needs it,
or, for a role that wraps the policy, when the recipe configures it.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ClassVar, Sequence

from pydantic import Field, PrivateAttr
from torch import Tensor, nn

from polo.core.aggregation import Aggregation, StepCounts
from polo.core.batch import RolloutBatch
from polo.core.losses.value import clipped_value_loss
from polo.core.registry import METHODS, Component, Registry
from polo.policy.action_mask import ActionMaskedPolicy
from polo.policy.policy import Policy, ValueModel
from polo.policy.reference import frozen_copy

ROLES: Registry = Registry("role", ("polo.roles", METHODS))


@dataclass
class RoleResources:
    """What the run lends a role before it is built (``Role.bind``)."""

    warm_start: Callable[..., Path] | None = None
    """``warm_start(overrides, seed, label, setting)``: the folder of the built-in model warm-started on the run's
    task with the recipe's ``warm_start`` settings changed by ``overrides`` and its seed by ``seed`` (None: the
    run's), cached like the run's own warm start; ``label`` names it in the log and the progress bar
    (``teacher warm start``), ``setting`` where its settings live in a warning (``roles.teacher.warm_start``)."""
    temperature: float = 1.0
    """The rollout temperature: the log-probs of the batch (``old_logp``, ``ref_logp``) are taken at it, so a
    role comparing its own log-probs with them takes its own at it too."""
    rule_scores: Callable[[Sequence[str], Sequence, Sequence[str]], tuple[Tensor, Tensor]] | None = None
    """``rule_scores(names, examples, completions)``: the run task's rewards ``names`` (its own or registered) of
    each completion, ``[B, K]``, and each reward's largest value ``[K]`` (``inf`` when undeclared): a rule judge's
    criteria."""


class Role(Component):
    """Builds one model from the policy (or a folder, an endpoint); checkpointed with the run."""

    _resources: RoleResources = PrivateAttr(default_factory=RoleResources)

    trainable: ClassVar[bool] = False
    """True for roles trained beside the policy (critics, the implicit PRM): they have ``lr`` (their own AdamW),
    ``warmup_steps`` (steps during which only they learn) and a ``loss``."""
    wraps_policy: ClassVar[bool] = False
    """True for roles that change the policy itself (``wrap``); they are built when the recipe configures them."""
    checkpointed: ClassVar[bool] = True
    """False for a model that is rebuilt identically when a run resumes (a frozen copy of the initial policy)."""

    def bind(self, resources: RoleResources) -> None:
        """Receive the run's resources before ``build``."""
        self._resources = resources

    def preflight(self, log: Callable[[str], None]) -> None:
        """Before any work (the warm start included): wait for what the role needs from outside the run, or refuse to
        start without it in one line (an HTTP judge's server); nothing here."""

    def build(self, policy: Policy) -> nn.Module:
        raise NotImplementedError

    def wrap(self, policy: Policy, model: nn.Module) -> Policy:
        return policy

    def on_update(self, model: nn.Module, policy: Policy, step: int) -> None:
        """After the policy update of step ``step`` (completed steps)."""

    def diagnostics(self, model: nn.Module, policy: Policy) -> dict[str, float]:
        """What the role reports for the step's metrics row, after ``on_update`` (``policy``: the wrapped one)."""
        return {}

    def loss(self, model: nn.Module, micro: RolloutBatch, counts: StepCounts,
             aggregation: Aggregation) -> tuple[Tensor, dict[str, float]]:
        """A trainable role's loss on one micro-batch of a minibatch (``counts``: the minibatch's totals, so that
        the micro-batch losses add up to the minibatch's, as the policy's do) and its diagnostics, which the
        trainer logs as ``NAME/KEY``; the trainer backpropagates it into ``model`` and steps its optimizer."""
        raise NotImplementedError(f"role {self.registry_name!r} is trainable but defines no loss")


@ROLES.register("reference")
class Reference(Role):
    """π_ref: a frozen copy of the policy as training starts (KL terms, ``ref_logp``)."""

    checkpointed = False

    def build(self, policy: Policy) -> nn.Module:
        return frozen_copy(policy)


@ROLES.register("critic")
class Critic(Role):
    """PPO's value model V(s_t): its own copy of the policy's trunk and a zero-initialised head, trained on the
    clipped value loss ``max((V − R)², (clip(V, V_old ± value_clip) − R)²)/2`` against the advantage
    estimator's returns."""

    trainable = True
    value_input: ClassVar[str] = "values"
    """The batch input holding this critic's values at rollout time (the clip's V_old)."""

    lr: float = Field(1e-3, gt=0)
    value_clip: float | None = Field(0.5, gt=0)
    warmup_steps: int = Field(0, ge=0)
    """Steps at the start during which only the critics learn (the policy is frozen)."""

    def build(self, policy: Policy) -> nn.Module:
        return ValueModel.from_policy(policy)

    def prompts(self, batch) -> tuple[Tensor, Tensor]:
        """The prompt this critic reads before the response."""
        return batch.prompt_ids, batch.prompt_mask

    def loss(self, model: nn.Module, micro: RolloutBatch, counts: StepCounts,
             aggregation: Aggregation) -> tuple[Tensor, dict[str, float]]:
        """The clipped value loss against ``micro.returns`` (V_old: the batch input ``value_input``), aggregated
        like the policy loss."""
        predicted = model(*self.prompts(micro), micro.response_ids, micro.response_mask)
        token_loss = clipped_value_loss(predicted, micro.input(self.value_input), micro.returns, self.value_clip)
        return aggregation(token_loss, micro.mask, counts), {}


@ROLES.register("privileged_critic")
class PrivilegedCritic(Critic):
    """ReDiPPO's reference-guided critic: a second value model whose prompt also holds the ground-truth answer.
    "ReDiPPO: Reference-Guided Value Calibration and Discrepancy-Aware Token Reweighting for Mathematical
    Reasoning" (arXiv id not found)."""

    value_input = "values_privileged"

    def prompts(self, batch) -> tuple[Tensor, Tensor]:
        return batch.extras["privileged_prompt_ids"], batch.extras["privileged_prompt_mask"]


@ROLES.register("masking_policy")
class MaskingPolicy(Role):
    """NLPO's masking policy ψ: a frozen copy of the policy, refreshed every ``sync_every`` steps, whose top-p
    nucleus bounds the policy's action space (``ActionMaskedPolicy``). "Is Reinforcement Learning (Not) for
    Natural Language Processing" (arXiv:2210.01241)."""

    wraps_policy = True

    top_p: float = Field(0.9, gt=0, le=1)
    min_tokens_to_keep: int = Field(1, ge=1)
    sync_every: int = Field(5, ge=1)

    def build(self, policy: Policy) -> nn.Module:
        return frozen_copy(policy)

    def wrap(self, policy: Policy, model: nn.Module) -> Policy:
        return ActionMaskedPolicy(policy, model, self.top_p, self.min_tokens_to_keep)

    def on_update(self, model: nn.Module, policy: Policy, step: int) -> None:
        if step % self.sync_every == 0:
            model.load_state_dict(policy.state_dict())

    def diagnostics(self, model: nn.Module, policy: Policy) -> dict[str, float]:
        """``nlpo/masked_vocab_frac``: the share of the vocabulary outside ψ's nucleus at the response tokens of
        the step's last training forward (0: the mask restricts nothing)."""
        return {"nlpo/masked_vocab_frac": policy.masked_vocab_frac}
