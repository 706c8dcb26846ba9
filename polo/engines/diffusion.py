"""The ``diffusion`` engine: ``single_turn`` rollouts of a masked diffusion LM (``model.kind: diffusion``)."""
from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, model_validator

from polo.core.elbo import ElboSettings
from polo.core.registry import ConfigError
from polo.policy.diffusion import DiffusionPolicy
from polo.engines.base import ENGINES, EngineSetup
from polo.engines.sampler import SampleOutput
from polo.engines.single_turn import SingleTurn


@ENGINES.register("diffusion")
class DiffusionEngine(SingleTurn):
    """G completions per prompt decoded by the diffusion policy's own sampler (``steps`` denoising steps with
    ``remasking``), scored like ``single_turn``; the rows' ``old_logp`` are their per-position ELBO contributions
    (polo.core.elbo) under the sampling policy, estimated with ``quadrature`` and ``mc_samples`` masks per node. The
    engine sets these ELBO settings on the policy and on every diffusion role model (the reference), so behaviour,
    reference and current ELBOs use the same rule and masks."""

    policy_kinds: ClassVar[frozenset[str]] = frozenset({"diffusion"})
    """The ``model.kind`` values this engine samples."""
    paper = ("Improving Reasoning for Diffusion Language Models via Group Diffusion Policy Optimization "
             "(arXiv:2510.08554)")
    provenance = "CODE"

    steps: int | None = Field(None, gt=0)
    """Denoising steps per response; None: one per canvas position (``max_new_tokens``)."""
    remasking: Literal["low_confidence", "random"] = "low_confidence"
    """Which predicted positions each step commits: the most confident, or a random share."""
    quadrature: str = "gauss-2"
    """Rule over the masking ratio of the ELBO: gauss-1, gauss-2, gauss-3, simpson, uniform-M or discrete-M."""
    mc_samples: int = Field(1, ge=1)
    """Masks per quadrature node (K)."""
    mask_seed: int = 0
    """Salt of the rows' content-derived mask keys."""

    @model_validator(mode="after")
    def _valid(self) -> "DiffusionEngine":
        if self.vllm is not None:
            raise ValueError("engine diffusion decodes with the policy's own sampler: drop engine.vllm")
        try:
            self.elbo_settings()
        except ValueError as err:
            raise ValueError(f"engine diffusion: {err}") from None
        return self

    def elbo_settings(self) -> ElboSettings:
        return ElboSettings(self.quadrature, self.mc_samples, self.mask_seed)

    def configure(self, policy) -> None:
        """Refuse a policy of another kind; give a diffusion policy this engine's ELBO settings."""
        if not isinstance(policy, DiffusionPolicy):
            raise ConfigError(f"engine diffusion samples masked diffusion LMs (model.kind: diffusion), got a "
                              f"{type(policy).__name__}: set model.kind=diffusion or use another engine")
        policy.elbo = self.elbo_settings()

    def setup(self, setup: EngineSetup) -> None:
        super().setup(setup)
        for model in setup.models.values():
            if isinstance(model, DiffusionPolicy):
                self.configure(model)

    def generate(self, policy, prompt_ids, prompt_mask, **sampling) -> SampleOutput:
        self.configure(policy)
        return super().generate(policy, prompt_ids, prompt_mask, steps=self.steps, remasking=self.remasking,
                                **sampling)
