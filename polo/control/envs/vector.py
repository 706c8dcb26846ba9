"""Vectorised environments the way CleanRL builds them: ``SyncVectorEnv`` with same-step autoreset, and per
environment the wrapper chain FlattenObservation → RecordEpisodeStatistics → ClipAction → NormalizeObservation
→ clip obs → NormalizeReward(γ) → clip reward (each optional)."""
from __future__ import annotations

from typing import Any

import numpy as np
from pydantic import Field

from polo.control.envs.registration import gymnasium, register_builtin_environments
from polo.core.registry import Settings


class EnvSettings(Settings):
    """Which environment, how many copies, and the wrappers around each copy."""

    id: str = "Pendulum-v1"
    """A gymnasium id (``Pendulum-v1``, or one of polo's ``polo/NAME-v0``)."""
    num_envs: int = Field(1, ge=1)
    kwargs: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments of ``gymnasium.make``."""
    flatten: bool = True
    clip_action: bool = True
    """Clip actions to the Box bounds inside the environment (the policy stores the unclipped sample)."""
    normalize_obs: bool = True
    clip_obs: float | None = 10.0
    normalize_reward: bool = True
    clip_reward: float | None = 10.0


def _single_env(settings: EnvSettings, gamma: float):
    gym = gymnasium()
    register_builtin_environments()
    env = gym.make(settings.id, **settings.kwargs)
    if settings.flatten:
        env = gym.wrappers.FlattenObservation(env)
    env = gym.wrappers.RecordEpisodeStatistics(env)
    if settings.clip_action and isinstance(env.action_space, gym.spaces.Box):
        env = gym.wrappers.ClipAction(env)
    if settings.normalize_obs:
        env = gym.wrappers.NormalizeObservation(env)
        if settings.clip_obs is not None:
            c = settings.clip_obs
            env = gym.wrappers.TransformObservation(env, lambda obs: np.clip(obs, -c, c), env.observation_space)
    if settings.normalize_reward:
        env = gym.wrappers.NormalizeReward(env, gamma=gamma)
        if settings.clip_reward is not None:
            c = settings.clip_reward
            env = gym.wrappers.TransformReward(env, lambda r: np.clip(r, -c, c))
    return env


def make_vector_env(settings: EnvSettings, gamma: float, num_envs: int | None = None):
    """``num_envs`` (default ``settings.num_envs``) wrapped copies in a ``SyncVectorEnv`` that resets a finished
    copy in the same step (its final observation and episode statistics arrive in ``infos["final_info"]``)."""
    gym = gymnasium()
    n = num_envs or settings.num_envs
    return gym.vector.SyncVectorEnv([lambda: _single_env(settings, gamma) for _ in range(n)],
                                    autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)


def observation_normalizers(envs) -> list:
    """The NormalizeObservation wrapper of each copy in ``envs`` (empty when observations are not normalised)."""
    gym = gymnasium()
    found = []
    for env in envs.envs:
        while isinstance(env, gym.Wrapper):
            if isinstance(env, gym.wrappers.NormalizeObservation):
                found.append(env)
                break
            env = env.env
    return found


def freeze_normalization(source, target) -> None:
    """Give each copy in ``target`` the observation statistics of ``source``'s first copy, frozen (deterministic
    evaluation with the statistics training reached)."""
    src = observation_normalizers(source)
    for norm in observation_normalizers(target):
        norm.obs_rms.mean, norm.obs_rms.var, norm.obs_rms.count = (
            src[0].obs_rms.mean.copy(), src[0].obs_rms.var.copy(), src[0].obs_rms.count)
        norm.update_running_mean = False


def finished_episodes(infos: dict) -> tuple[list[float], list[int]]:
    """Returns and lengths of the episodes that ended in this step (RecordEpisodeStatistics under same-step
    autoreset reports them in ``infos["final_info"]["episode"]``, masked by ``["_episode"]``)."""
    final = infos.get("final_info")
    if not final or "episode" not in final:
        return [], []
    done = final["_episode"]
    return ([float(r) for r in final["episode"]["r"][done]], [int(n) for n in final["episode"]["l"][done]])
