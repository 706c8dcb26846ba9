"""LambdaMix's policy: M LoRA adapters on a frozen causal LM, mixed per row by a preference vector λ.

On every target linear layer ``W0`` the effective weight of row b is ``W(λ_b) = W0 + (α/r)·Σ_m λ[b,m]·B_m A_m``,
so ``y = x W0ᵀ + (α/r)·Σ_m λ[b,m]·(x A_mᵀ) B_mᵀ`` (``A_m`` ``[r, d_in]``, ``B_m`` ``[d_out, r]``, one pair per
objective m). Rows of one batch have different λ (one per prompt, shared by its G rollouts), which peft's LoRA
cannot express; the ``lambda_mix`` role wraps the policy with these layers. The gradient reaching ``(A_m, B_m)``
from row b is scaled by ``λ[b,m]``; the base weights are frozen. After training a user picks λ and merges:
``merged_state_dict(λ)`` is a plain model's weights.

LambdaMix: steerable multi-objective GRPO with one LoRA per objective (2026; reconstructed from its abstract,
no arXiv id found).
"""
from __future__ import annotations

import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from pydantic import Field
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

from polo.core.registry import ConfigError
from polo.policy.lora import is_lora
from polo.policy.policy import Policy
from polo.policy.prefix import CachedDecoder
from polo.roles.base import ROLES, Role

ADAPTERS_FILE = "lambda_mix.safetensors"
SETTINGS_FILE = "lambda_mix.json"


class Preference:
    """The λ rows ``[rows, M]`` of the model call in progress, shared by every mixed layer of one policy."""

    def __init__(self) -> None:
        self.lam: Tensor | None = None


class Adapter(nn.Module):
    """One target layer's M adapter pairs: ``A`` ``[M, r, d_in]`` (Kaiming-uniform, as ``nn.Linear``), ``B``
    ``[M, d_out, r]`` (zeros, so every mixture starts at the base model)."""

    def __init__(self, objectives: int, rank: int, d_in: int, d_out: int):
        super().__init__()
        self.A = nn.Parameter(torch.empty(objectives, rank, d_in))
        self.B = nn.Parameter(torch.zeros(objectives, d_out, rank))
        bound = 1 / math.sqrt(d_in)  # kaiming_uniform_(a=√5) on a [r, d_in] weight
        nn.init.uniform_(self.A, -bound, bound)

    def delta(self, lam: Tensor) -> Tensor:
        """``Σ_m λ_m B_m A_m`` ``[d_out, d_in]`` for one preference vector ``lam`` ``[M]``."""
        return torch.einsum("m,mor,mrd->od", lam.to(self.A), self.B, self.A)


class MixedLinear(nn.Module):
    """``base(x) + scale·Σ_m λ[b,m]·(x A_mᵀ) B_mᵀ`` with ``λ`` the current rows of ``preference``."""

    def __init__(self, base: nn.Linear, adapter: Adapter, scale: float, preference: Preference):
        super().__init__()
        self.base, self.adapter, self.scale = base, adapter, scale
        self.__dict__["preference"] = preference  # shared state, not a submodule

    def forward(self, x: Tensor) -> Tensor:
        lam = self.preference.lam
        if lam is None or lam.shape[0] != x.shape[0]:
            got = "none" if lam is None else f"{lam.shape[0]} rows"
            raise RuntimeError(f"lambda_mix: a model call on {x.shape[0]} rows under preference vectors for {got}: "
                               f"call the model through LambdaMixPolicy (forward_logp, decoder)")
        flat = x.reshape(x.shape[0], -1, x.shape[-1])
        h = torch.einsum("btd,mrd->btmr", flat, self.adapter.A) * lam.to(flat.dtype)[:, None, :, None]
        delta = torch.einsum("btmr,mor->bto", h, self.adapter.B) * self.scale
        return self.base(x) + delta.reshape(*x.shape[:-1], -1)


def target_linears(model: nn.Module, targets: list[str]) -> list[tuple[str, nn.Linear]]:
    """The ``nn.Linear`` modules whose last name part is in ``targets``, by qualified name; a ConfigError when
    none matches."""
    found = [(name, m) for name, m in model.named_modules()
             if isinstance(m, nn.Linear) and name.rsplit(".", 1)[-1] in targets]
    if not found:
        raise ConfigError(f"roles.lambda_mix.target_modules={targets} matches no linear layer of the model")
    return found


class LambdaMixPolicy(Policy):
    """``policy`` with M adapters on its target linears, mixed per row by the batch input ``lam`` ``[B, M]``.

    ``lam`` reaches every model call: ``forward_logp(..., lam=...)`` (the trainer passes ``model_inputs(batch)``)
    and the sampler's prefill (``inputs={"lam": ...}``), after which the decoder keeps each row's λ through
    finished rows leaving the batch. A call without ``lam`` uses the uniform mixture (``1/M`` each): held-out
    accuracy during training is the uniform mixture's. Training forwards run plain over ``prompt ++ response``
    (no shared prompt prefill, which would mix rows with different λ).
    """

    input_names = ("lam",)

    def __init__(self, policy: Policy, adapters: nn.ModuleList, names: list[str], rank: int, alpha: float):
        super().__init__(policy.model, policy.tokenizer, chat_template=policy.chat_template,
                         compute_dtype=policy.compute_dtype)
        self.__dict__["adapters"] = adapters  # reached through the model's layers: one state_dict entry each
        self.names, self.rank, self.alpha = names, rank, alpha
        self.objectives = adapters[0].A.shape[0]
        self.preference = Preference()
        modules = dict(self.hf_model.named_modules())
        for name, adapter in zip(names, adapters):
            parent, _, leaf = name.rpartition(".")
            setattr(modules[parent], leaf, MixedLinear(modules[name], adapter, alpha / rank, self.preference))
        self.hf_model.requires_grad_(False)
        adapters.requires_grad_(True)

    def rows(self, lam: Tensor | None, n: int) -> Tensor:
        """``[n, M]`` float32 preference rows on the model's device: ``lam``, or the uniform mixture; a clear error
        for a wrong shape or a non-finite value."""
        if lam is None:
            return torch.full((n, self.objectives), 1 / self.objectives, device=self.device)
        if lam.shape != (n, self.objectives) or not bool(torch.isfinite(lam).all()):
            raise ValueError(f"lambda_mix: lam must be {n} finite preference vectors of {self.objectives} weights, got "
                             f"shape {tuple(lam.shape)}{'' if torch.isfinite(lam).all() else ' with NaN/inf'}")
        return lam.to(self.device, torch.float32)

    @contextmanager
    def mixing(self, lam: Tensor) -> Iterator[None]:
        """Model calls inside run with preference rows ``lam`` ``[rows, M]``."""
        previous, self.preference.lam = self.preference.lam, lam
        try:
            yield
        finally:
            self.preference.lam = previous

    def forward_logp(self, prompt_ids: Tensor, prompt_mask: Tensor, response_ids: Tensor, response_mask: Tensor,
                     *, lam: Tensor | None = None, hidden_layer: int | None = None, **kwargs) -> dict[str, Tensor]:
        """``Policy.forward_logp`` with row b's adapters mixed by ``lam[b]``; one plain forward (the hidden-state
        path, layer 0 when none is asked for)."""
        with self.mixing(self.rows(lam, len(prompt_ids))):
            out = super().forward_logp(prompt_ids, prompt_mask, response_ids, response_mask,
                                       hidden_layer=0 if hidden_layer is None else hidden_layer, **kwargs)
        if hidden_layer is None:
            del out["hidden_states"]
        return out

    forward = forward_logp

    def decoder(self) -> "MixedDecoder":
        return MixedDecoder(self)

    def merged_state_dict(self, lam: Tensor | list[float]) -> dict[str, Tensor]:
        """The plain model's weights at preference ``lam`` ``[M]``: ``W0 + (α/r)·Σ_m λ_m B_m A_m`` on every target
        layer, under the base model's own parameter names (adapters left out)."""
        lam = torch.as_tensor(lam, dtype=torch.float32)
        state = self.base_state_dict()
        for name, adapter in zip(self.names, self.adapters):
            key = f"{name}.weight"
            state[key] = state[key] + (self.alpha / self.rank) * adapter.delta(lam).detach().to(state[key].dtype)
        return state

    def base_state_dict(self) -> dict[str, Tensor]:
        """The frozen base weights under the base model's own names."""
        return {k.replace(".base.", "."): v for k, v in self.hf_model.state_dict().items() if ".adapter." not in k}

    def merged(self, lam: Tensor | list[float]) -> Policy:
        """A plain ``Policy`` (a copy) with the adapters merged at ``lam``."""
        model = type(self.hf_model)(self.hf_model.config)
        model.load_state_dict(self.merged_state_dict(lam))
        model.generation_config = self.hf_model.generation_config
        return Policy(model.to(self.device), self.tokenizer, chat_template=self.chat_template,
                      compute_dtype=self.compute_dtype)

    def save(self, path: str | Path, *, merge_lora: bool = False) -> None:
        """The base model folder plus ``lambda_mix.safetensors`` (the adapters) and ``lambda_mix.json``
        (``load_mixture`` restores it); ``merge_lora``: a plain model merged at the uniform mixture instead."""
        path = Path(path)
        if merge_lora:
            uniform = torch.full((self.objectives,), 1 / self.objectives)
            self.hf_model.save_pretrained(path, state_dict=self.merged_state_dict(uniform))
        else:
            self.hf_model.save_pretrained(path, state_dict=self.base_state_dict())
            save_file({k: v.detach().contiguous() for k, v in self.adapters.state_dict().items()}, path / ADAPTERS_FILE)
            (path / SETTINGS_FILE).write_text(json.dumps({"names": self.names, "rank": self.rank, "alpha": self.alpha,
                                                          "objectives": self.objectives}, indent=2) + "\n")
        self.tokenizer.save_pretrained(path)

    @classmethod
    def load_mixture(cls, path: str | Path, **load) -> "LambdaMixPolicy":
        """A folder written by ``save``: the base model (``Policy.load`` keywords) with its saved adapters."""
        path = Path(path)
        settings = json.loads((path / SETTINGS_FILE).read_text())
        base = Policy.load(path, **load)
        adapters = new_adapters(base, settings["names"], settings["objectives"], settings["rank"])
        adapters.load_state_dict(load_file(path / ADAPTERS_FILE))
        return cls(base, adapters, settings["names"], settings["rank"], settings["alpha"])


class MixedDecoder(CachedDecoder):
    """The KV-cached decoder with each row's λ: set at the prefill (the ``lam`` input), kept in step with the rows
    through ``select``."""

    def __init__(self, policy: LambdaMixPolicy):
        super().__init__(policy.model, policy.hf_model, policy.autocast)
        self.policy, self.lam = policy, None

    def prefill(self, distinct: tuple[Tensor, Tensor, Tensor], lam: Tensor | None = None, **inputs: Tensor) -> Tensor:
        """With ``lam`` the sampler gives one prefill row per batch row; without it every row is uniform, so shared
        prefills are fine."""
        ids, _, inverse = distinct
        self.lam = self.policy.rows(lam, len(inverse))
        with self.policy.mixing(self.lam[:len(ids)] if lam is None else self.lam):
            return super().prefill(distinct, **inputs)

    def step(self, inputs: dict[str, Tensor]) -> Tensor:
        with self.policy.mixing(self.lam):
            return super().step(inputs)

    def select(self, keep: Tensor) -> None:
        super().select(keep)
        self.lam = self.lam[keep]


def new_adapters(policy: Policy, names: list[str], objectives: int, rank: int) -> nn.ModuleList:
    """Fresh adapters (``Adapter``) for the named linears of ``policy``'s model, on its device."""
    modules = dict(policy.hf_model.named_modules())
    return nn.ModuleList(Adapter(objectives, rank, modules[n].in_features, modules[n].out_features)
                         for n in names).to(policy.device)


@ROLES.register("lambda_mix")
class LambdaMix(Role):
    """LambdaMix's adapters: ``objectives`` LoRA pairs of rank ``rank`` on each ``target_modules`` linear of the
    frozen policy, mixed per row by the preference vector the ``lambda_mix`` engine draws (``LambdaMixPolicy``).
    The adapters are the policy's only trainable parameters and live in its ``state_dict`` (checkpointed with it).
    Needs ``model.lora.r: 0`` (peft's single adapter would be a second, unmixed one)."""

    paper = ("LambdaMix: steerable multi-objective GRPO with one LoRA per objective (2026, arXiv id not found; "
             "reconstructed from its abstract)")
    provenance = "RECONSTRUCTED"
    wraps_policy = True
    checkpointed = False

    objectives: int = Field(2, ge=2)
    """M: one adapter per objective, i.e. per reward column, in the recipe's reward order."""
    rank: int = Field(16, ge=1)
    alpha: float = Field(32.0, gt=0)
    """Adapter scale numerator: updates are scaled by alpha / rank."""
    target_modules: list[str] = Field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])

    def build(self, policy: Policy) -> nn.Module:
        if is_lora(policy.model):
            raise ConfigError("roles.lambda_mix mixes its own adapters: set model.lora.r=0 (no peft LoRA)")
        names = [name for name, _ in target_linears(policy.hf_model, self.target_modules)]
        adapters = new_adapters(policy, names, self.objectives, self.rank)
        adapters.names = names
        return adapters

    def wrap(self, policy: Policy, model: nn.Module) -> Policy:
        return LambdaMixPolicy(policy, model, model.names, self.rank, self.alpha)
