"""Text environments for multi-turn agent RL: the contract, the registry and the built-ins.

Built-ins: ``TextGrid-v0`` (gridworld, global or egocentric observations), ``KBLookup-v0`` (multi-hop lookup
through a search tool; ``memory`` and ``skills`` variants) and ``GuessNum-v0`` (guess-the-number with an
underspecified user). ``make("TextGrid-v0", obs_mode="local")`` or ``make({"name": ..., **knobs})`` builds
one; ``@register_environment(name)`` adds a plugin's; ``GymTextEnvironment`` (``{"name": "gym", "entry_point":
"my_env:MyEnv"}``) wraps a user's gymnasium-style one and ``ToolEnvironment`` (``"tools"``) a TRL-style object whose
public methods are tools::

    env = make("GuessNum-v0")
    obs = env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(env.expert())

polo.envs imports no other package of the middle layer (tests/test_layers.py, ``SIDEWAYS``): polo.tasks, the
engines and the input providers import it. An environment that runs programs receives its code sandbox from
whoever builds it (``make(config, sandbox=tester)``, a ``ProgramTester``).
"""
from polo.envs.base import Environment, ProgramTester, StepResult, Transition, obs_hash
from polo.envs.gym_adapter import GymTextEnvironment
from polo.envs.tool_adapter import ToolEnvironment
from polo.envs.registry import ENVIRONMENTS, make, register_environment
from polo.envs.render import ACTION_SEP, TURN_SEP, render_context
from polo.envs.transcripts import Transcript, expert_policy, has_expert, noisy_expert, play, random_policy

__all__ = [
    "ACTION_SEP",
    "ENVIRONMENTS",
    "TURN_SEP",
    "ToolEnvironment",
    "Environment",
    "GymTextEnvironment",
    "ProgramTester",
    "StepResult",
    "Transcript",
    "Transition",
    "expert_policy",
    "has_expert",
    "make",
    "noisy_expert",
    "obs_hash",
    "play",
    "random_policy",
    "register_environment",
    "render_context",
]
