"""The ``frozen_actor`` role: Retroformer's frozen actor, the model that plays the trials while the policy (the
retrospective model) learns to write reflections for it ("Retroformer: Retrospective Large Language Agents with
Policy Gradient Optimization", arXiv:2308.02151).

Sources (``source``): ``initial``, a frozen copy of the policy as training starts (the built-in model's warm start
on the ``reflection`` task teaches one model both parts, so the actor is that model frozen; rebuilt identically on
resume), or ``path``, any local checkpoint folder with the policy's vocabulary.
"""
from __future__ import annotations

from typing import Literal

from pydantic import model_validator

from polo.policy.policy import Policy
from polo.policy.reference import frozen_copy, frozen_load
from polo.roles.base import ROLES, Role
from polo.roles.teacher import check_vocabulary


@ROLES.register("frozen_actor")
class FrozenActor(Role):
    """A frozen model that acts in the environment; never trained, never checkpointed (rebuilt on resume)."""

    paper = "Retroformer: Retrospective Large Language Agents with Policy Gradient Optimization (arXiv:2308.02151)"
    checkpointed = False

    source: Literal["initial", "path"] = "initial"
    """``initial``: a frozen copy of the starting policy; ``path``: the checkpoint folder in ``path``."""
    path: str | None = None
    """Checkpoint folder of the ``path`` source (a ``save_pretrained`` folder with the policy's tokenizer)."""

    @model_validator(mode="after")
    def _path_for_path_source(self) -> "FrozenActor":
        if (self.source == "path") != (self.path is not None):
            raise ValueError(f"source={self.source!r} with path={self.path!r}: source 'path' needs a checkpoint "
                             f"folder in path, and path is only read by source 'path'")
        return self

    def build(self, policy: Policy) -> Policy:
        if self.source == "initial":
            return frozen_copy(policy)
        actor = frozen_load(self.path, policy, policy.chat_template)
        check_vocabulary(actor, policy, f"roles.frozen_actor (source path, {self.path})")
        return actor
