"""The catalogue printed by ``polo list``: registered components per stage and shipped recipes."""
from __future__ import annotations

import yaml


def load_all_components() -> None:
    """Import every module that registers components."""
    import polo.core.advantages  # noqa: F401
    import polo.core.aggregation  # noqa: F401
    import polo.core.credit  # noqa: F401
    import polo.core.divergences  # noqa: F401
    import polo.core.losses  # noqa: F401
    import polo.core.shaping  # noqa: F401
    import polo.train.samplers  # noqa: F401

    try:
        import polo.core.optim_hooks  # noqa: F401
    except ImportError:
        pass


def catalog_text() -> str:
    from polo.core.registry import ALL_REGISTRIES
    from polo.tasks import task_names
    from polo.tasks.rewards import reward_names
    from polo.train.config import RECIPES_DIR

    load_all_components()
    lines = []
    for registry in ALL_REGISTRIES:
        entries = list(registry)
        if not entries:
            continue
        lines.append(f"{registry.kind} ({len(entries)}):")
        for name, cls in entries:
            where = f"  [{cls.spec}, {cls.provenance}]" if cls.spec else ""
            summary = (cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else ""
            lines.append(f"  {name:<28}{summary}{where}")
    lines.append(f"tasks: {', '.join(task_names())}")
    lines.append(f"rewards: {', '.join(reward_names())}")
    lines.append("recipes:")
    for path in sorted(RECIPES_DIR.glob("*.yaml")):
        desc = (yaml.safe_load(path.read_text()) or {}).get("description", "")
        lines.append(f"  {path.stem:<28}{desc}")
    return "\n".join(lines)
