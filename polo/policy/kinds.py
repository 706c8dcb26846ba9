"""Policy kinds (``model.kind``): which policy class a run builds, loads and warm-starts.

``causal`` is the autoregressive Hugging Face LM (``Policy``); ``diffusion`` a masked diffusion LM that decodes
itself and scores sequences by their ELBO (``DiffusionPolicy``); ``vision`` a vision-language model whose
prompts carry images (``VisionPolicy``). Each is a ``Policy`` subclass with ``build_tiny`` (the untrained
built-in model), ``load`` (a local checkpoint folder of its family) and the hooks documented on ``Policy``.
Classes are imported on first use, so ``import polo`` needs none of the kinds' extra code.
"""
from __future__ import annotations

import importlib

from polo.core.registry import ConfigError

KINDS = {"causal": "polo.policy.policy:Policy", "diffusion": "polo.policy.diffusion:DiffusionPolicy",
         "vision": "polo.policy.vision:VisionPolicy"}


def policy_class(kind: str) -> type:
    """The policy class of ``model.kind``; a ConfigError naming an unknown kind and the known ones."""
    if kind not in KINDS:
        raise ConfigError(f"model.kind={kind!r} is not a policy kind: expected one of {', '.join(KINDS)}")
    module, name = KINDS[kind].split(":")
    return getattr(importlib.import_module(module), name)
