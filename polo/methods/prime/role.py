"""PRIME's implicit process reward model: a trainable copy of the policy, π_φ, whose log-likelihood ratio to the
frozen reference π_ref scores every response token, trained online on the verifier's outcome labels.

"Process Reinforcement through Implicit Rewards" (arXiv:2502.01456); the loss and the reward as in the authors'
code (PRIME-RL/PRIME, ``compute_ce_dpo_loss_rm``; verl's ``recipe/prime``).
"""
from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import Tensor, nn

from polo.core.aggregation import Aggregation, StepCounts
from polo.core.batch import RolloutBatch
from polo.policy.policy import Policy
from polo.roles.base import ROLES, Role


class ImplicitRewardModel(nn.Module):
    """π_φ and β: the implicit process reward of response token t is ``r_t = β·(log π_φ(y_t | x, y_<t) −
    log π_ref(y_t | x, y_<t))``, so that ``Σ_t r_t = β·log π_φ(y|x)/π_ref(y|x)`` is the response's reward."""

    def __init__(self, lm: Policy, beta: float):
        super().__init__()
        self.lm, self.beta = lm, beta

    def forward(self, batch: RolloutBatch, ref_logp: Tensor, temperature: float) -> Tensor:
        """``[B, T]`` r_t of the batch's response tokens (0 where masked), the log-probs of π_φ taken at
        ``temperature`` like ``ref_logp``'s; differentiable in π_φ unless called under ``no_grad``."""
        logp = self.lm.forward_logp(batch.prompt_ids, batch.prompt_mask, batch.response_ids, batch.response_mask,
                                    temperature=temperature)["logp"]
        return self.beta * (logp - ref_logp) * batch.mask


@ROLES.register("implicit_prm")
class ImplicitPRM(Role):
    """PRIME's implicit PRM: a copy of the policy, trained beside it on the verifier's outcome labels, whose
    log-ratio to the reference rewards each response token.

    The loss is the cross-entropy of the outcome label c_i (the verifier's ``correct``) against σ of the
    response's implicit reward:

    ``L = −(1/B')·Σ_i [c_i·log σ(s_i) + (1 − c_i)·log(1 − σ(s_i))]``,  ``s_i = β·Σ_t (log π_φ − log π_ref)(y_{i,t})``

    over the B' responses of the minibatch with a trained token (``StepCounts.sequences``), so that micro-batches
    add up to the minibatch's mean. ``ref_logp`` is read from the batch (the ``process_rewards`` provider writes
    it); the provider scores the batch with π_φ as it is before this loss updates it (PRIME's single-forward
    ``update: after``). Logs ``implicit_prm/accuracy`` (share of responses with ``s_i > 0`` exactly when
    correct) and ``implicit_prm/reward`` (mean s_i)."""

    paper = "Process Reinforcement through Implicit Rewards (arXiv:2502.01456)"
    provenance = "CODE"
    trainable = True

    beta: float = Field(0.05, gt=0)
    """β of the implicit reward (PRIME's ``beta_train``)."""
    lr: float = Field(1e-3, gt=0)
    """The PRM's AdamW learning rate (PRIME: 1e-6 for the PRM, twice its policy's 5e-7; here twice polo's
    default policy lr)."""
    warmup_steps: int = Field(0, ge=0)
    """Steps at the start during which only the trainable roles learn (the policy is frozen); PRIME has none."""

    def build(self, policy: Policy) -> ImplicitRewardModel:
        """π_φ starts as a copy of the policy (the same weights as π_ref, so every r_t is 0 at step 1)."""
        return ImplicitRewardModel(copy.deepcopy(policy), self.beta)

    def loss(self, model: ImplicitRewardModel, micro: RolloutBatch, counts: StepCounts,
             aggregation: Aggregation) -> tuple[Tensor, dict[str, float]]:
        correct = micro.input("correct")
        if correct is None or micro.ref_logp is None:
            raise ValueError(f"implicit_prm's loss reads the batch's 'correct' (the verifier's label, written by the "
                             f"engine) and 'ref_logp' (written by the process_rewards provider); got "
                             f"correct={'missing' if correct is None else 'present'}, "
                             f"ref_logp={'missing' if micro.ref_logp is None else 'present'}")
        score = model(micro, micro.ref_logp, self._resources.temperature).sum(-1)
        label = correct.to(score)
        trained = (micro.mask.sum(-1) > 0).to(score)
        cross_entropy = F.binary_cross_entropy_with_logits(score, label, reduction="none")
        loss = (cross_entropy * trained).sum() / max(counts.sequences, 1.0)
        rows = trained.sum().clamp_min(1)
        with torch.no_grad():
            hits = ((score > 0).to(score) == label).to(score)
            stats = {"accuracy": float((hits * trained).sum() / rows), "reward": float((score * trained).sum() / rows)}
        return loss, stats
