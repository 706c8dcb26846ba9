"""Control step cost: polo's ``gym`` engine and PPO update against a hand-written CleanRL-style loop.

Rollout: T steps of N copies of the same vectorised environment (polo's ``make_vector_env``: CleanRL's wrapper
chain, same-step autoreset), acting with the same networks (polo's ``gaussian`` policy and critic; the
hand-written side gets copies of their weights in CleanRL's ``Agent``). polo = ``GymEngine.rollout`` (records,
episode statistics, the ``[N, T]`` batch); hand-written = the reference's ``Rollout.collect``
(bench/cleanrl_ppo_continuous.py: ``torch.distributions.Normal``, time-major buffers, episode returns); floor =
the leanest loop (the closed-form Gaussian sample and log-prob polo uses, buffers, nothing else). They run
alternately (A B C A B C …, separate environment instances built alike); medians of the per-step times and the
medians of the paired ratios are printed. Target: polo / hand-written ≤ 1.3.

Update: ``epochs`` × ``minibatches`` minibatch steps on one rollout's N·T steps: polo's ``PPO.update`` (the
``ppo_continuous`` recipe with these N, T) against the reference's ``update`` with the same sizes, timed the same
way (no target; the ratio is reported).

    python bench/control_step.py [--quick] [--env Pendulum-v1] [--num-envs 4] [--num-steps 1024]
"""
from __future__ import annotations

import math

import torch

from cleanrl_ppo_continuous import Agent, Args, Rollout, update
from common import interleaved, median, paired_ratio, parse_args, print_table
from polo.control.engines.base import CONTROL_ENGINES
from polo.control.envs.vector import EnvSettings, make_vector_env
from polo.control.recipe import load_control_recipe

GAMMA = 0.9
EPOCHS, MINIBATCHES = 10, 64
CLEANRL_ALGORITHM = ["policy.sde=false", "env.normalize_obs=true", "env.normalize_reward=true", "value_clip=0.2"]
"""The shipped ``ppo_continuous`` set back to CleanRL's algorithm (white Gaussian noise instead of gSDE, observation
and reward normalisation, value clipping), which the hand-written reference implements."""


def polo_method(env_id: str, n: int, t: int, seed: int = 0, epochs: int = EPOCHS, minibatches: int = MINIBATCHES):
    """polo's PPO (the ``ppo_continuous`` recipe with CleanRL's algorithm) on ``env_id`` with N copies × T steps, set
    up."""
    recipe = load_control_recipe("ppo_continuous", [f"env.id={env_id}", f"env.num_envs={n}", f"engine.num_steps={t}",
                                                    f"total_steps={n * t}", f"advantage.gamma={GAMMA}",
                                                    f"epochs={epochs}", f"minibatches={minibatches}",
                                                    *CLEANRL_ALGORITHM])
    method = recipe.method
    method.setup(seed, lambda *_: None)
    return method


def agent_like(method) -> Agent:
    """CleanRL's Agent holding copies of polo's policy and critic weights (the same architecture)."""
    envs = method._engine.envs
    agent = Agent(math.prod(envs.single_observation_space.shape), math.prod(envs.single_action_space.shape))
    agent.actor_mean.load_state_dict(method._policy.mean.state_dict())
    agent.actor_logstd.data.copy_(method._policy.log_std.data)
    agent.critic.load_state_dict(method._critic.net.state_dict())
    return agent


def floor_loop(agent: Agent, envs, t: int):
    """The leanest rollout: per step the policy mean, one Gaussian sample, its log-prob, the value, one
    environment step, time-major buffers; returns a function doing T steps."""
    obs = torch.as_tensor(envs.reset(seed=0)[0], dtype=torch.float32)
    n = obs.shape[0]
    bufs = {"obs": torch.empty(t, *obs.shape), "act": torch.empty(t, n, *envs.single_action_space.shape)}
    bufs.update({k: torch.empty(t, n) for k in ("logp", "value", "reward", "done")})

    @torch.no_grad()
    def run() -> None:
        nonlocal obs
        log_std = agent.actor_logstd
        for step in range(t):
            mean = agent.actor_mean(obs)
            noise = torch.randn_like(mean)
            action = mean + noise * log_std.exp()
            bufs["obs"][step], bufs["act"][step] = obs, action
            bufs["logp"][step] = (-0.5 * noise ** 2 - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
            bufs["value"][step] = agent.critic(obs).squeeze(-1)
            next_obs, reward, terminated, truncated, _ = envs.step(action.numpy())
            bufs["reward"][step] = torch.from_numpy(reward)
            bufs["done"][step] = torch.from_numpy(terminated | truncated)
            obs = torch.from_numpy(next_obs).float()
    return run


def rollout_case(env_id: str, n: int, t: int, reps: int) -> list:
    method = polo_method(env_id, n, t)
    engine = CONTROL_ENGINES.build({"name": "gym", "num_steps": t}, "engine")
    engine.start(EnvSettings(id=env_id, num_envs=n), GAMMA, seed=0)
    policy, critic, generator = method._policy, method._critic, torch.Generator().manual_seed(0)
    agent = agent_like(method)
    hand = Rollout(make_vector_env(EnvSettings(id=env_id, num_envs=n), GAMMA), t, seed=0)
    floor = floor_loop(agent, make_vector_env(EnvSettings(id=env_id, num_envs=n), GAMMA), t)
    times, _ = interleaved({"polo": lambda: engine.rollout(policy, critic, generator),
                            "hand": lambda: hand.collect(agent), "floor": floor}, reps)
    us = {k: [1e6 * s / (n * t) for s in v] for k, v in times.items()}
    return [env_id, n, t, median(us["polo"]), median(us["hand"]), median(us["floor"]),
            paired_ratio(times["polo"], times["hand"]), paired_ratio(times["polo"], times["floor"])]


def update_case(env_id: str, n: int, t: int, reps: int) -> list:
    method = polo_method(env_id, n, t)
    batch = method.collect()
    result = method._advantage(batch)
    batch.advantages, batch.returns = result.advantages, result.returns
    agent = agent_like(method)
    args = Args(env_id=env_id, num_envs=n, num_steps=t, num_minibatches=MINIBATCHES, update_epochs=EPOCHS,
                learning_rate=method.lr, gamma=GAMMA)
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)
    hand = Rollout(make_vector_env(EnvSettings(id=env_id, num_envs=n), GAMMA), t, seed=0)
    hand.collect(agent)
    b = hand.flat(*hand.advantages(agent, GAMMA, args.gae_lambda))
    times, _ = interleaved({"polo": lambda: method.update(batch), "hand": lambda: update(agent, optimizer, b, args)},
                           reps)
    us = {k: [1e6 * s / (n * t) for s in v] for k, v in times.items()}
    return [env_id, n, t, f"{EPOCHS}x{MINIBATCHES}", median(us["polo"]), median(us["hand"]),
            paired_ratio(times["polo"], times["hand"])]


def same_update(env_id: str) -> tuple[float, float]:
    """Both updates on the same rollout from the same weights, 2 epochs of one full-batch minibatch (no shuffling
    order to differ): ``(max |θ_polo − θ_reference|, max |θ_after − θ_before|)`` over all parameters."""
    method = polo_method(env_id, 2, 128, epochs=2, minibatches=1)
    batch = method.collect()
    result = method._advantage(batch)
    batch.advantages, batch.returns = result.advantages, result.returns
    steps = method.step_tensors(batch)
    b = {"obs": steps["obs"], "actions": steps["act.action"], "logprobs": steps["old_logp"],
         "advantages": steps["advantages"], "returns": steps["returns"], "values": steps["values"]}
    agent = agent_like(method)
    before = torch.cat([p.detach().flatten().clone() for p in agent.parameters()])
    args = Args(num_minibatches=1, update_epochs=2, learning_rate=method.lr)
    update(agent, torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5), b, args)
    method.update(batch)
    ref = agent_like(method)  # polo's updated weights, in the reference's parameter order
    polo_after = torch.cat([p.detach().flatten() for p in ref.parameters()])
    ref_after = torch.cat([p.detach().flatten() for p in agent.parameters()])
    return float((polo_after - ref_after).abs().max()), float((ref_after - before).abs().max())


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], env={"default": "Pendulum-v1"},
                      **{"num-envs": {"type": int, "nargs": "+", "default": None, "help": "N (several: one case each)"},
                         "num-steps": {"type": int, "default": None, "help": "T"},
                         "reps": {"type": int, "default": None, "help": "timed repetitions"}})
    ns = args.num_envs or ([4] if args.quick else [1, 4, 16])
    t = args.num_steps or (256 if args.quick else 1024)
    reps = args.reps or (3 if args.quick else 7)
    rows = [rollout_case(args.env, n, max(1, t * 4 // n) if args.num_steps is None else t, reps) for n in ns]
    print_table(f"rollout: one environment step + one policy/critic step, µs per (copy·step), median of {reps}", [
        "env", "N", "T", "polo µs/step", "hand-written µs/step", "floor µs/step", "polo / hand-written",
        "polo / floor"], rows)
    print("target: polo / hand-written <= 1.3")
    n = 4 if 4 in ns else ns[0]
    rows = [update_case(args.env, n, t, max(2, reps // 2))]
    print_table(f"update: epochs x minibatches over one rollout, µs per (copy·step), median of {max(2, reps // 2)}", [
        "env", "N", "T", "epochs x minibatches", "polo µs/step", "hand-written µs/step", "polo / hand-written"], rows)
    print("no target (polo's update scores each minibatch through the registered policy loss and aggregation)")
    gap, moved = same_update(args.env)
    print(f"\nsame update from the same weights and rollout (2 epochs x 1 full-batch minibatch): max |θ_polo − θ_ref| = "
          f"{gap:.2e}, while the update moved the parameters by up to {moved:.2e}")


if __name__ == "__main__":
    main()
