"""LoRA adapters through peft (an optional dependency, imported only when an adapter is used)."""
from __future__ import annotations

from pathlib import Path

from pydantic import Field

from polo.core.registry import Settings


class LoraConfig(Settings):
    """``r = 0`` disables LoRA (full fine-tuning)."""

    r: int = Field(0, ge=0)
    """Adapter rank; 0: no LoRA."""
    alpha: int = Field(16, gt=0)
    """LoRA scaling numerator (updates are scaled by alpha / r)."""
    dropout: float = Field(0.0, ge=0, lt=1)
    """Dropout on the adapter input."""
    target_modules: list[str] = Field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])
    """Module names that get adapters."""


def _peft():
    try:
        import peft
    except ImportError as err:
        raise ImportError("LoRA needs the optional dependency peft: pip install 'polo[lora]'") from err
    return peft


def apply_lora(model, cfg: LoraConfig):
    """Wrap ``model`` with fresh LoRA adapters (only they stay trainable); unchanged when ``cfg.r == 0``."""
    if cfg.r <= 0:
        return model
    peft = _peft()
    config = peft.LoraConfig(
        r=cfg.r, lora_alpha=cfg.alpha, lora_dropout=cfg.dropout, target_modules=cfg.target_modules,
        task_type="CAUSAL_LM",
    )
    return peft.get_peft_model(model, config)


def load_lora(model, path: str | Path):
    """Wrap ``model`` with the trainable adapter saved in ``path``."""
    return _peft().PeftModel.from_pretrained(model, str(path), is_trainable=True)


def is_lora(model) -> bool:
    return hasattr(model, "peft_config")


def base_state_dict(model) -> dict:
    """Weights of a LoRA-wrapped model's base, under the base model's own names (adapters left out)."""
    state = model.get_base_model().state_dict()
    return {k.replace(".base_layer.", "."): v for k, v in state.items() if "lora_" not in k}


def merged_state_dict(model) -> dict:
    """``base_state_dict`` with each adapter's delta added to its base weight (``W + ΔW``, the sum peft's
    ``merge_and_unload`` computes), without changing ``model``."""
    state = base_state_dict(model)
    for name, module in model.get_base_model().named_modules():
        if isinstance(module, _peft().tuners.lora.LoraLayer):
            for adapter in module.active_adapters:
                key = f"{name}.weight"
                state[key] = state[key] + module.get_delta_weight(adapter).to(state[key].dtype)
    return state
