"""The state of vectorised gymnasium environments as plain data (tensors, numbers, strings), so that a checkpoint
holds it without pickled code and a resumed run continues bit for bit.

Every object of each copy's wrapper chain (the wrappers, the environment itself, nested helpers such as running
statistics) is read through its attributes: numbers, strings, arrays, lists/tuples/dicts of those and random
generators are kept; environments, wrappers, spaces and callables are skipped (rebuilt from the recipe). An
environment whose state is held otherwise defines ``state_dict()`` / ``load_state_dict(state)`` and is saved
through them.
"""
from __future__ import annotations

import enum
from typing import Any

import numpy as np
import torch

from polo.control.envs.registration import gymnasium

_SKIP = object()
ARRAY, GENERATOR, TUPLE, OBJECT = "__array__", "__generator__", "__tuple__", "__object__"


def _plain(value: Any, depth: int) -> Any:
    """``value`` as plain data, or ``_SKIP``."""
    gym = gymnasium()
    if isinstance(value, np.generic):  # before float: np.float64 is a float, but pickles as a numpy scalar
        return value.item()
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "biuf":
            return _SKIP
        return {ARRAY: torch.from_numpy(np.ascontiguousarray(value).copy()), "dtype": str(value.dtype)}
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, np.random.Generator):
        return {GENERATOR: _plain(value.bit_generator.state, depth)}
    if isinstance(value, (list, tuple)):
        items = [_plain(v, depth) for v in value]
        if any(v is _SKIP for v in items):
            return _SKIP
        return {TUPLE: items} if isinstance(value, tuple) else items
    if isinstance(value, dict):
        items = {k: _plain(v, depth) for k, v in value.items()}
        if any(not isinstance(k, str) or v is _SKIP for k, v in items.items()):
            return _SKIP
        return items
    if depth > 0 and hasattr(value, "__dict__") and not callable(value) and not isinstance(
            value, (gym.Env, gym.Wrapper, gym.Space, gym.vector.VectorEnv, enum.Enum)):
        return {OBJECT: _attributes(value, depth - 1)}
    return _SKIP


def _attributes(obj: Any, depth: int = 2) -> dict[str, Any]:
    out = {}
    for key, value in vars(obj).items():
        plain = _plain(value, depth)
        if plain is not _SKIP:
            out[key] = plain
    return out


def _value(saved: Any, current: Any) -> Any:
    """The object ``saved`` describes (``current``: the attribute it replaces, updated in place when it is a
    generator or a nested object)."""
    if isinstance(saved, dict) and ARRAY in saved:
        return saved[ARRAY].numpy().astype(saved["dtype"]).copy()
    if isinstance(saved, dict) and GENERATOR in saved:
        current.bit_generator.state = _value(saved[GENERATOR], None)
        return current
    if isinstance(saved, dict) and OBJECT in saved:
        _restore(current, saved[OBJECT])
        return current
    if isinstance(saved, dict) and TUPLE in saved:
        return tuple(_value(v, None) for v in saved[TUPLE])
    if isinstance(saved, dict):
        return {k: _value(v, None) for k, v in saved.items()}
    if isinstance(saved, list):
        return [_value(v, None) for v in saved]
    if isinstance(saved, torch.Tensor):
        return saved.clone()
    return saved


def _restore(obj: Any, saved: dict[str, Any]) -> None:
    for key, value in saved.items():
        setattr(obj, key, _value(value, getattr(obj, key, None)))


def _chain(env) -> list:
    """A copy's wrappers from the outside in, then the environment itself."""
    gym = gymnasium()
    out = [env]
    while isinstance(out[-1], gym.Wrapper):
        out.append(out[-1].env)
    return out


def snapshot(envs) -> dict[str, Any]:
    """Plain data of the vector environment and every object of every copy's wrapper chain."""
    copies = []
    for env in envs.envs:
        layers = []
        for layer in _chain(env):
            own = getattr(layer, "state_dict", None) if layer is env.unwrapped else None
            layers.append({"custom": own()} if callable(own) else {"attributes": _attributes(layer)})
        copies.append(layers)
    return {"vector": _attributes(envs), "copies": copies}


def restore(envs, state: dict[str, Any]) -> None:
    """Put ``snapshot(envs)``'s data back into ``envs`` (built from the same recipe)."""
    _restore(envs, state["vector"])
    for env, layers in zip(envs.envs, state["copies"]):
        for layer, saved in zip(_chain(env), layers):
            if "custom" in saved:
                layer.load_state_dict(saved["custom"])
            else:
                _restore(layer, saved["attributes"])
