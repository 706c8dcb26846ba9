"""polo's own gymnasium environments, registered under ``polo/NAME-v0`` the first time one is made."""
from __future__ import annotations

BUILTIN_ENVIRONMENTS: dict[str, str] = {
    "polo/SyntheticDRAM-v0": "polo.control.envs.synthetic_dram:SyntheticDRAM",
    "polo/AgentGraph-v0": "polo.control.envs.agent_graph:AgentGraph",
    "polo/TwoGoalBandit-v0": "polo.control.envs.two_goal_bandit:TwoGoalBandit",
    "polo/UnicycleID-v0": "polo.control.envs.unicycle_id:UnicycleID",
    "polo/ToyReg2D-v0": "polo.control.envs.toyreg2d_env:ToyReg2DEnv",
    "polo/STLNav2D-v0": "polo.control.envs.stl_nav2d:STLNav2D",
    "polo/Merge1D-v0": "polo.control.envs.merge1d:Merge1D",
}
"""gymnasium id → ``module:Class`` entry point (each method's demo environment adds its line)."""


def gymnasium():
    """The gymnasium module, or an ImportError naming the extra that installs it."""
    try:
        import gymnasium
    except ImportError as err:  # pragma: no cover - the extra is installed in CI
        raise ImportError("control environments need gymnasium: pip install 'polo[control]'") from err
    return gymnasium


def register_builtin_environments() -> None:
    """Register every entry of ``BUILTIN_ENVIRONMENTS`` with gymnasium (idempotent)."""
    gym = gymnasium()
    for env_id, entry_point in BUILTIN_ENVIRONMENTS.items():
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point=entry_point)
