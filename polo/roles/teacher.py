"""The teacher role: the model that scores the student's own responses for distillation (GKD, KEPO), for
self-distillation with privileged context (SRPO's SDPO branch) and for evidence channels (VERPO).

Sources (``source``):

* ``initial``: a frozen copy of the policy as training starts (rebuilt identically on resume);
* ``ema``: a copy moved after every update by ``θ_T ← (1 − λ)·θ_T + λ·θ`` (``ema_rate`` λ), checkpointed;
* ``policy``: the live policy itself, re-prompted (no copy; providers run without gradient);
* ``path``: any local Hugging Face checkpoint folder with the student's vocabulary;
* ``warm_start``: the built-in model trained longer on the run's task (the run's warm start with the
  teacher's ``warm_start`` settings in place of the recipe's, cached like it).

The privileged-context templates are used by the teacher input providers (polo/inputs/teacher_inputs.py):
``{prompt}`` is the example's prompt (with a chat template, the content of its last message) and
``{solution}`` a sibling's response text.
"""
from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field, field_validator, model_validator

from polo.core.registry import ConfigError, Settings
from polo.core.templates import check_template
from polo.policy.policy import Policy
from polo.policy.reference import frozen_copy, frozen_load
from polo.roles.base import ROLES, Role

SIBLING_TEMPLATE = "{prompt}\n\nCorrect solution:\n\n{solution}\n\nCorrectly solve the original question.\n"
NEGATIVE_TEMPLATE = ("{prompt}\n\nAn incorrect attempt:\n\n{solution}\n\nAvoid its mistakes and correctly solve "
                     "the original question.\n")


class TeacherWarmStart(Settings):
    """The ``warm_start`` teacher's supervised phase: these replace the recipe's ``warm_start`` settings of the same
    names (batch size, learning rate and check size stay the recipe's). By default the built-in model sees 4× the
    problems and trains until 90 % held-out greedy accuracy (on 2-digit addition the default model gets there in
    about 2900 steps)."""

    steps: int = Field(4000, ge=0)
    """Most warm-start steps of the teacher."""
    examples: int = Field(8000, gt=0)
    """Distinct training problems the teacher is shown."""
    target_accuracy: float | None = Field(0.9, gt=0, le=1)
    """Stop once the teacher's held-out greedy accuracy reaches this; None: run all ``steps``."""
    check_every: int = Field(100, gt=0)
    """Steps between accuracy checks (a long warm start would otherwise spend much of its time checking)."""
    hinted: float = Field(0.0, ge=0, lt=1)
    """Share of hinted demonstrations (the recipe's ``warm_start.hinted``): 0, the teacher reads plain prompts only
    and is the same checkpoint for every recipe on the task."""


def check_vocabulary(teacher: Policy, student: Policy, where: str) -> None:
    """ConfigError unless the teacher's logits and tokens are the student's: it re-scores the student's token
    ids and its distributions are compared entry by entry."""
    sizes = teacher.hf_model.config.vocab_size, student.hf_model.config.vocab_size
    if sizes[0] != sizes[1]:
        raise ConfigError(f"{where}: the teacher's vocabulary has {sizes[0]} entries, the student's {sizes[1]}; "
                          f"a teacher must share the student's tokenizer")
    if teacher.tokenizer.get_vocab() != student.tokenizer.get_vocab():
        raise ConfigError(f"{where}: the teacher's tokenizer maps tokens to other ids than the student's (both have "
                          f"{sizes[0]} entries); a teacher must share the student's tokenizer")


class TeacherModel(Policy):
    """What the teacher role builds: a ``Policy`` over the teacher's model (its input providers score with it, an
    engine may generate with it) carrying the role's ``settings`` (``top_k``, the templates) for the providers.
    For ``source: policy`` it shares the live policy's model: trained, moved and checkpointed as the policy."""

    def __init__(self, policy: Policy, settings: "Teacher"):
        super().__init__(policy.model, policy.tokenizer, chat_template=policy.chat_template,
                         compute_dtype=policy.compute_dtype)
        self.settings = settings


@ROLES.register("teacher")
class Teacher(Role):
    """A frozen model that re-reads the student's responses; see the module docstring for the sources."""

    source: Literal["initial", "ema", "policy", "path", "warm_start"] = "initial"
    """Where the teacher comes from: ``initial`` (frozen copy of the starting policy), ``ema`` (a copy following
    the policy), ``policy`` (the live policy, re-prompted), ``path`` (a local checkpoint folder), ``warm_start``
    (the built-in model trained longer on the task)."""
    ema_rate: float = Field(0.05, gt=0, le=1)
    """λ of the ``ema`` source: ``θ_T ← (1 − λ)·θ_T + λ·θ`` after every update (SDPO's 0.05)."""
    path: str | None = None
    """Checkpoint folder of the ``path`` source (a ``save_pretrained`` folder with the student's tokenizer)."""
    warm_start: TeacherWarmStart = TeacherWarmStart()
    """The ``warm_start`` source's supervised phase (in place of the recipe's ``warm_start`` settings)."""
    warm_start_seed: int | None = None
    """Seed of the ``warm_start`` teacher; None: the run's seed (a teacher per seed). Fix it to give every seed of
    a comparison the same teacher checkpoint."""
    top_k: int = Field(0, ge=0)
    """0: the teacher's full next-token distribution (``[B,T,V]`` in host memory: small vocabularies only); k > 0:
    its k most likely token ids plus one tail bin with the remaining mass (k at least the vocabulary size: the full
    distribution)."""
    sibling_template: str = SIBLING_TEMPLATE
    """Teacher prompt holding a correct sibling response (SRPO's SDPO branch, VERPO's q+)."""
    negative_template: str = NEGATIVE_TEMPLATE
    """Teacher prompt holding an incorrect sibling response (VERPO's q−)."""

    @field_validator("sibling_template", "negative_template")
    @classmethod
    def _templates(cls, value: str) -> str:
        return check_template(value, ("prompt", "solution"))

    @model_validator(mode="after")
    def _path_for_path_source(self) -> "Teacher":
        if (self.source == "path") != (self.path is not None):
            raise ValueError(f"source={self.source!r} with path={self.path!r}: source 'path' needs a checkpoint "
                             f"folder in path, and path is only read by source 'path'")
        return self

    @property
    def checkpointed(self) -> bool:  # type: ignore[override]
        """Only the EMA teacher holds state of its own; the others are rebuilt identically on resume."""
        return self.source == "ema"

    def build(self, policy: Policy) -> TeacherModel:
        if self.source == "policy":  # the live policy's model: never frozen here
            return TeacherModel(policy, self)
        if self.source in ("initial", "ema"):
            teacher = frozen_copy(policy)
        else:
            folder = self.path if self.source == "path" else self._warm_started()
            teacher = frozen_load(folder, policy, policy.chat_template)
            check_vocabulary(teacher, policy, f"roles.teacher (source {self.source}, {folder})")
        return TeacherModel(teacher, self).eval()

    def _warm_started(self):
        if self._resources.warm_start is None:
            raise ConfigError("roles.teacher: source 'warm_start' needs the run's warm start (Role.bind with "
                              "RoleResources(warm_start=...), which the trainer does)")
        return self._resources.warm_start(self.warm_start.model_dump(), self.warm_start_seed, "teacher warm start",
                                          "roles.teacher.warm_start")

    @torch.no_grad()
    def on_update(self, model: TeacherModel, policy: Policy, step: int) -> None:
        if self.source == "ema":
            for teacher, live in zip(model.parameters(), policy.parameters()):
                teacher.lerp_(live, self.ema_rate)
