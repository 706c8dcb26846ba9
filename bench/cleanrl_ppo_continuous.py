"""An independent single-file PPO for continuous actions in CleanRL's style (the reference polo's ``ppo`` method is
compared with; it imports nothing from polo).

Algorithm and defaults follow CleanRL's documented ``ppo_continuous_action`` (Proximal Policy Optimization
Algorithms, arXiv:1707.06347; "The 37 Implementation Details of PPO", Huang et al., ICLR blog track 2022):

* environments: a ``SyncVectorEnv`` (same-step autoreset) of FlattenObservation → RecordEpisodeStatistics →
  ClipAction → NormalizeObservation → clip obs to ±10 → NormalizeReward(γ) → clip reward to ±10;
* agent: separate actor and critic MLPs, 2×64 tanh, orthogonal weights (gain √2, last layer 0.01 for the actor
  mean and 1 for the critic), zero biases; a state-independent log-std parameter starting at 0;
* rollout: T steps of N copies, time-major buffers; ``done[t]`` flags the observation stored at step t as the first
  of a new episode (CleanRL's convention: an episode's end is seen one step later);
* GAE(γ, λ): ``δ_t = r_t + γ·(1 − done_{t+1})·V_{t+1} − V_t``, ``A_t = δ_t + γλ·(1 − done_{t+1})·A_{t+1}``, with
  ``V_T`` the value of the observation after the last step and a truncation treated like a termination;
  value targets ``R = A + V``;
* update: ``epochs`` passes over shuffled minibatches; per minibatch the advantages are standardised, the loss is
  ``mean max(−A·ρ, −A·clip(ρ, 1 ± ε)) + c_v·½·mean max((V − R)², (V_old + clip(V − V_old, ±ε) − R)²)
  − c_ent·H``, one Adam step (eps 1e-5) after clipping the global gradient norm to 0.5; the learning rate decays
  linearly to 0 over the iterations.

Evaluation (the protocol of polo's ``PPO.evaluate``): ``eval_episodes`` fresh copies reset with seeds
``eval_seed + k``, their observation statistics set to the first training copy's and frozen, the deterministic
action (the mean), the undiscounted return of each copy's first episode.

    python bench/cleanrl_ppo_continuous.py --env-id Pendulum-v1 --seed 0 --num-envs 4 --num-steps 1024 \
        --num-minibatches 64 --learning-rate 1e-3 --gamma 0.9 --total-timesteps 200000 --out /tmp/ref.jsonl

The output JSONL has one line per finished training episode, ``{"global_step", "episode_return"}``, then one
line ``{"eval_return", "eval_returns", "wall_s"}``.
"""
from __future__ import annotations

import argparse
import json
import math
import random
import time
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch
from torch import nn


@dataclass
class Args:
    env_id: str = "Pendulum-v1"
    seed: int = 1
    num_envs: int = 1
    num_steps: int = 2048
    num_minibatches: int = 32
    update_epochs: int = 10
    learning_rate: float = 3e-4
    anneal_lr: bool = True
    gamma: float = 0.99
    gae_lambda: float = 0.95
    total_timesteps: int = 1_000_000
    norm_adv: bool = True
    clip_coef: float = 0.2
    clip_vloss: bool = True
    ent_coef: float = 0.0
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    target_kl: float | None = None
    eval_episodes: int = 10
    eval_seed: int = 1_000_000
    threads: int = 1
    out: str | None = None

    @property
    def batch_size(self) -> int:
        return self.num_envs * self.num_steps

    @property
    def minibatch_size(self) -> int:
        return self.batch_size // self.num_minibatches

    @property
    def num_iterations(self) -> int:
        return self.total_timesteps // self.batch_size


def parse_args() -> Args:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name, default in vars(Args()).items():
        flag = "--" + name.replace("_", "-")
        if isinstance(default, bool):
            parser.add_argument(flag, type=lambda s: s.lower() in ("1", "true", "yes"), default=default)
        elif default is None:
            parser.add_argument(flag, type=float if name == "target_kl" else str, default=None)
        else:
            parser.add_argument(flag, type=type(default), default=default)
    return Args(**vars(parser.parse_args()))


# --------------------------------------------------------------------------- environments
def make_env(env_id: str, gamma: float):
    def thunk():
        env = gym.make(env_id)
        env = gym.wrappers.FlattenObservation(env)
        env = gym.wrappers.RecordEpisodeStatistics(env)
        env = gym.wrappers.ClipAction(env)
        env = gym.wrappers.NormalizeObservation(env)
        env = gym.wrappers.TransformObservation(env, lambda obs: np.clip(obs, -10, 10), env.observation_space)
        env = gym.wrappers.NormalizeReward(env, gamma=gamma)
        env = gym.wrappers.TransformReward(env, lambda r: np.clip(r, -10, 10))
        return env
    return thunk


def make_envs(env_id: str, num_envs: int, gamma: float) -> gym.vector.SyncVectorEnv:
    return gym.vector.SyncVectorEnv([make_env(env_id, gamma) for _ in range(num_envs)],
                                    autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)


def obs_normalizer(env):
    """The NormalizeObservation wrapper inside one wrapped copy."""
    while not isinstance(env, gym.wrappers.NormalizeObservation):
        env = env.env
    return env


# --------------------------------------------------------------------------- agent
def layer_init(layer: nn.Linear, std: float = math.sqrt(2), bias: float = 0.0) -> nn.Linear:
    nn.init.orthogonal_(layer.weight, std)
    nn.init.constant_(layer.bias, bias)
    return layer


class Agent(nn.Module):
    def __init__(self, obs_dim: int, act_dim: int):
        super().__init__()
        self.critic = nn.Sequential(layer_init(nn.Linear(obs_dim, 64)), nn.Tanh(), layer_init(nn.Linear(64, 64)),
                                    nn.Tanh(), layer_init(nn.Linear(64, 1), std=1.0))
        self.actor_mean = nn.Sequential(layer_init(nn.Linear(obs_dim, 64)), nn.Tanh(), layer_init(nn.Linear(64, 64)),
                                        nn.Tanh(), layer_init(nn.Linear(64, act_dim), std=0.01))
        self.actor_logstd = nn.Parameter(torch.zeros(1, act_dim))

    def get_value(self, x: torch.Tensor) -> torch.Tensor:
        return self.critic(x)

    def get_action_and_value(self, x: torch.Tensor, action: torch.Tensor | None = None):
        mean = self.actor_mean(x)
        dist = torch.distributions.Normal(mean, self.actor_logstd.expand_as(mean).exp())
        if action is None:
            action = dist.sample()
        return action, dist.log_prob(action).sum(1), dist.entropy().sum(1), self.critic(x)


# --------------------------------------------------------------------------- rollout, GAE, update
class Rollout:
    """Time-major buffers of T steps × N copies and the carried (next_obs, next_done)."""

    def __init__(self, envs, num_steps: int, seed: int):
        n = envs.num_envs
        self.envs, self.num_steps = envs, num_steps
        self.obs = torch.zeros((num_steps, n) + envs.single_observation_space.shape)
        self.actions = torch.zeros((num_steps, n) + envs.single_action_space.shape)
        self.logprobs, self.rewards, self.dones, self.values = (torch.zeros(num_steps, n) for _ in range(4))
        next_obs, _ = envs.reset(seed=seed)
        self.next_obs, self.next_done = torch.Tensor(next_obs), torch.zeros(n)
        self.episodes: list[tuple[int, float]] = []  # (global_step, return) of finished training episodes
        self.global_step = 0

    @torch.no_grad()
    def collect(self, agent: Agent) -> None:
        for step in range(self.num_steps):
            self.global_step += self.envs.num_envs
            self.obs[step] = self.next_obs
            self.dones[step] = self.next_done
            action, logprob, _, value = agent.get_action_and_value(self.next_obs)
            self.values[step] = value.flatten()
            self.actions[step] = action
            self.logprobs[step] = logprob
            next_obs, reward, terminations, truncations, infos = self.envs.step(action.cpu().numpy())
            self.rewards[step] = torch.tensor(reward).view(-1)
            self.next_obs = torch.Tensor(next_obs)
            self.next_done = torch.Tensor(np.logical_or(terminations, truncations).astype(np.float32))
            final = infos.get("final_info")
            if final and "episode" in final:
                for r in final["episode"]["r"][final["_episode"]]:
                    self.episodes.append((self.global_step, float(r)))

    @torch.no_grad()
    def advantages(self, agent: Agent, gamma: float, lam: float) -> tuple[torch.Tensor, torch.Tensor]:
        next_value = agent.get_value(self.next_obs).reshape(1, -1)
        adv = torch.zeros_like(self.rewards)
        last = 0
        for t in reversed(range(self.num_steps)):
            if t == self.num_steps - 1:
                going, value_next = 1.0 - self.next_done, next_value
            else:
                going, value_next = 1.0 - self.dones[t + 1], self.values[t + 1]
            delta = self.rewards[t] + gamma * value_next * going - self.values[t]
            adv[t] = last = delta + gamma * lam * going * last
        return adv, adv + self.values

    def flat(self, adv: torch.Tensor, returns: torch.Tensor) -> dict[str, torch.Tensor]:
        obs_shape, act_shape = self.obs.shape[2:], self.actions.shape[2:]
        return {"obs": self.obs.reshape((-1,) + obs_shape), "actions": self.actions.reshape((-1,) + act_shape),
                "logprobs": self.logprobs.reshape(-1), "advantages": adv.reshape(-1), "returns": returns.reshape(-1),
                "values": self.values.reshape(-1)}


def update(agent: Agent, optimizer: torch.optim.Optimizer, b: dict[str, torch.Tensor], args: Args) -> dict[str, float]:
    batch_size = b["obs"].shape[0]
    minibatch_size = batch_size // args.num_minibatches
    b_inds = np.arange(batch_size)
    clipfracs = []
    for _ in range(args.update_epochs):
        np.random.shuffle(b_inds)
        for start in range(0, batch_size, minibatch_size):
            mb = b_inds[start:start + minibatch_size]
            _, newlogprob, entropy, newvalue = agent.get_action_and_value(b["obs"][mb], b["actions"][mb])
            logratio = newlogprob - b["logprobs"][mb]
            ratio = logratio.exp()
            with torch.no_grad():
                approx_kl = ((ratio - 1) - logratio).mean()
                clipfracs.append(((ratio - 1.0).abs() > args.clip_coef).float().mean().item())
            mb_adv = b["advantages"][mb]
            if args.norm_adv:
                mb_adv = (mb_adv - mb_adv.mean()) / (mb_adv.std() + 1e-8)
            pg_loss = torch.max(-mb_adv * ratio, -mb_adv * torch.clamp(ratio, 1 - args.clip_coef, 1 + args.clip_coef)).mean()
            newvalue = newvalue.view(-1)
            if args.clip_vloss:
                v_unclipped = (newvalue - b["returns"][mb]) ** 2
                v_clipped = b["values"][mb] + torch.clamp(newvalue - b["values"][mb], -args.clip_coef, args.clip_coef)
                v_loss = 0.5 * torch.max(v_unclipped, (v_clipped - b["returns"][mb]) ** 2).mean()
            else:
                v_loss = 0.5 * ((newvalue - b["returns"][mb]) ** 2).mean()
            entropy_loss = entropy.mean()
            loss = pg_loss - args.ent_coef * entropy_loss + v_loss * args.vf_coef
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
            optimizer.step()
        if args.target_kl is not None and approx_kl > args.target_kl:
            break
    return {"pg_loss": pg_loss.item(), "v_loss": v_loss.item(), "approx_kl": approx_kl.item(),
            "clipfrac": float(np.mean(clipfracs))}


# --------------------------------------------------------------------------- evaluation
@torch.no_grad()
def evaluate(agent: Agent, train_envs, args: Args) -> list[float]:
    """``eval_episodes`` fresh copies (seeds ``eval_seed + k``), observation statistics of the first training copy,
    frozen; deterministic actions; each copy's first episode's undiscounted return."""
    envs = make_envs(args.env_id, args.eval_episodes, args.gamma)
    source = obs_normalizer(train_envs.envs[0]).obs_rms
    for env in envs.envs:
        norm = obs_normalizer(env)
        norm.obs_rms.mean, norm.obs_rms.var, norm.obs_rms.count = source.mean.copy(), source.var.copy(), source.count
        norm.update_running_mean = False
    obs, _ = envs.reset(seed=args.eval_seed)
    returns = np.full(args.eval_episodes, np.nan)
    while np.isnan(returns).any():
        obs, _, terminated, truncated, infos = envs.step(agent.actor_mean(torch.Tensor(obs)).numpy())
        ended = np.logical_or(terminated, truncated) & np.isnan(returns)
        if ended.any():
            returns[ended] = infos["final_info"]["episode"]["r"][ended]
    envs.close()
    return returns.tolist()


# --------------------------------------------------------------------------- training
def train(args: Args) -> dict:
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    envs = make_envs(args.env_id, args.num_envs, args.gamma)
    assert isinstance(envs.single_action_space, gym.spaces.Box), "only continuous action spaces are supported"
    agent = Agent(int(np.prod(envs.single_observation_space.shape)), int(np.prod(envs.single_action_space.shape)))
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)
    rollout = Rollout(envs, args.num_steps, args.seed)
    for iteration in range(1, args.num_iterations + 1):
        if args.anneal_lr:
            optimizer.param_groups[0]["lr"] = (1.0 - (iteration - 1.0) / args.num_iterations) * args.learning_rate
        rollout.collect(agent)
        adv, returns = rollout.advantages(agent, args.gamma, args.gae_lambda)
        update(agent, optimizer, rollout.flat(adv, returns), args)
    train_s = time.perf_counter() - start
    eval_returns = evaluate(agent, envs, args)
    envs.close()
    result = {"eval_return": float(np.mean(eval_returns)), "eval_returns": eval_returns,
              "train_s": train_s, "wall_s": time.perf_counter() - start}
    if args.out:
        with open(args.out, "w") as f:
            for step, ret in rollout.episodes:
                f.write(json.dumps({"global_step": step, "episode_return": ret}) + "\n")
            f.write(json.dumps(result) + "\n")
    return result


if __name__ == "__main__":
    args = parse_args()
    result = train(args)
    print(f"{args.env_id} seed {args.seed}: deterministic {args.eval_episodes}-episode mean {result['eval_return']:.1f} "
          f"(min {min(result['eval_returns']):.1f}), {result['wall_s']:.1f} s")
