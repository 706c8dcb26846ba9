"""polo's ``ppo_continuous`` recipe against the independent CleanRL-style reference (bench/cleanrl_ppo_continuous.py)
on Pendulum-v1 with the same settings: γ 0.9, λ 0.95, N 4 copies × T 1024 steps, 64 minibatches, 10 epochs,
lr 1e-3 annealed, 200k steps (48 iterations of 4096), seeds 0, 1, 2; one process at a time, one torch thread.

Reported per seed and implementation: the final deterministic 10-episode mean (the same protocol in both: frozen
observation statistics of the first training copy, seeds 1,000,000 + k), the training-return curve at 25k-step
marks (mean of the per-iteration mean training returns of the iterations ending in the 25k steps up to the mark;
the reference's episodes are grouped into the same 4096-step iterations), the training time (the loop, without
the final evaluation) and the process wall time. polo runs the shipped recipe set back to CleanRL's algorithm
(white Gaussian noise instead of the recipe's gSDE, observation and reward normalisation, value clipping 0.2), with
``eval_every`` and ``checkpoint_every`` moved to the end (training is unchanged: evaluation uses its own
environments and no training generator), so both processes do the same work. Writes a PNG overlaying the curves.

    nice python bench/control_side_by_side.py [--quick] [--seeds 0 1 2] [--png PATH]
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from control_step import CLEANRL_ALGORITHM

HERE = Path(__file__).resolve().parent
SETTINGS = {"gamma": 0.9, "num_envs": 4, "num_steps": 1024, "minibatches": 64, "lr": 1e-3}
MARK = 25_000


def run(command: list[str], cwd: Path) -> None:
    """Run one training process; its stderr is shown if it fails."""
    done = subprocess.run(command, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode:
        raise RuntimeError(f"{' '.join(command[:3])} ... failed ({done.returncode}):\n{done.stderr[-3000:]}")


def run_polo(seed: int, total: int, folder: Path) -> dict:
    run_dir = folder / f"polo_s{seed}"
    s = SETTINGS
    overrides = [f"seed={seed}", "threads=1", f"total_steps={total}", f"env.num_envs={s['num_envs']}",
                 f"engine.num_steps={s['num_steps']}", f"minibatches={s['minibatches']}", f"lr={s['lr']}",
                 f"advantage.gamma={s['gamma']}", "lr_schedule=linear", *CLEANRL_ALGORITHM, "eval_every=100000",
                 "checkpoint_every=100000"]
    start = time.perf_counter()
    run([sys.executable, "-c", "import sys; from polo.cli import main; sys.exit(main(sys.argv[1:]))",
         "train", "ppo_continuous", *overrides, "--run-dir", str(run_dir)], folder)
    wall = time.perf_counter() - start
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    curve = [(r["train/env_steps"], r["train/episode_return"]) for r in rows if "train/episode_return" in r]
    final = [r for r in rows if "eval/return" in r][-1]
    return {"eval": final["eval/return"], "eval_min": final["eval/return_min"], "curve": curve,
            "train_s": sum(r.get("time/iteration", 0.0) for r in rows), "wall_s": wall}


def run_reference(seed: int, total: int, folder: Path) -> dict:
    out = folder / f"ref_s{seed}.jsonl"
    s = SETTINGS
    start = time.perf_counter()
    run([sys.executable, str(HERE / "cleanrl_ppo_continuous.py"), "--env-id", "Pendulum-v1", "--seed", str(seed),
         "--num-envs", str(s["num_envs"]), "--num-steps", str(s["num_steps"]), "--num-minibatches", str(s["minibatches"]),
         "--learning-rate", str(s["lr"]), "--gamma", str(s["gamma"]), "--total-timesteps", str(total),
         "--threads", "1", "--out", str(out)], folder)
    wall = time.perf_counter() - start
    lines = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    episodes, result = lines[:-1], lines[-1]
    per = s["num_envs"] * s["num_steps"]
    by_iteration: dict[int, list[float]] = {}
    for e in episodes:  # the 4096-step iteration each episode ended in, as polo logs them
        by_iteration.setdefault(-(-e["global_step"] // per) * per, []).append(e["episode_return"])
    curve = [(step, statistics.fmean(v)) for step, v in sorted(by_iteration.items())]
    return {"eval": result["eval_return"], "eval_min": min(result["eval_returns"]), "curve": curve,
            "train_s": result["train_s"], "wall_s": wall}


def at_marks(curve: list[tuple[int, float]], total: int) -> list[float | None]:
    """Mean of the curve's values in (m − MARK, m] for each mark m = MARK, 2·MARK, … ≤ total (rounded up)."""
    marks = range(MARK, total + MARK, MARK)
    out = []
    for m in marks:
        vals = [v for step, v in curve if m - MARK < step <= m]
        out.append(statistics.fmean(vals) if vals else None)
    return out


def plot(results: dict, total: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for name, color in (("polo", "tab:blue"), ("reference", "tab:orange")):
        runs = results[name]
        for seed, r in runs.items():
            xs, ys = zip(*r["curve"])
            ax.plot(xs, ys, color=color, alpha=0.3, lw=0.8)
        steps = sorted({s for r in runs.values() for s, _ in r["curve"]})
        mean = [statistics.fmean([dict(r["curve"])[s] for r in runs.values() if s in dict(r["curve"])]) for s in steps]
        evals = ", ".join(f"{r['eval']:.0f}" for r in runs.values())
        ax.plot(steps, mean, color=color, lw=2, label=f"{name} (mean of {len(runs)} seeds; final eval {evals})")
    ax.set_xlabel("environment steps")
    ax.set_ylabel("training episode return (per-iteration mean)")
    ax.set_title(f"PPO on Pendulum-v1: polo ppo_continuous vs CleanRL-style reference ({total // 1000}k steps)")
    ax.title.set_fontsize(9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.0f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="seed 0 only, 16k steps")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--total-steps", type=int, default=200_000)
    parser.add_argument("--png", default="control_side_by_side.png", help="where the curves go")
    args = parser.parse_args()
    seeds, total = ([0], 16_384) if args.quick else (args.seeds, args.total_steps)
    print(f"# control_side_by_side.py{' --quick' if args.quick else ''}: Pendulum-v1, {SETTINGS}, {total} steps, "
          f"seeds {seeds}", flush=True)
    results: dict[str, dict[int, dict]] = {"polo": {}, "reference": {}}
    with tempfile.TemporaryDirectory(prefix="polo-bench-control-") as tmp:
        for seed in seeds:
            for name, fn in (("polo", run_polo), ("reference", run_reference)):
                results[name][seed] = r = fn(seed, total, Path(tmp))
                print(f"  {name} seed {seed}: eval {r['eval']:.1f} (min {r['eval_min']:.1f}), train {r['train_s']:.1f} s, "
                      f"wall {r['wall_s']:.1f} s", flush=True)
    marks = list(range(MARK, total + MARK, MARK))
    print("\n## final deterministic 10-episode mean (worst episode) and time per run")
    print("| seed | polo eval | reference eval | polo train s | reference train s | polo wall s | reference wall s |")
    print("|---|---|---|---|---|---|---|")
    for seed in seeds:
        p, r = results["polo"][seed], results["reference"][seed]
        print(f"| {seed} | {p['eval']:.1f} ({p['eval_min']:.0f}) | {r['eval']:.1f} ({r['eval_min']:.0f}) | "
              f"{p['train_s']:.1f} | {r['train_s']:.1f} | {p['wall_s']:.1f} | {r['wall_s']:.1f} |")
    for key in ("eval", "train_s", "wall_s"):
        pm = statistics.fmean(results["polo"][s][key] for s in seeds)
        rm = statistics.fmean(results["reference"][s][key] for s in seeds)
        print(f"mean {key}: polo {pm:.1f}, reference {rm:.1f}" + (f" (polo/reference {pm / rm:.2f})" if key != "eval" else ""))
    print(f"worst-seed eval: polo {min(results['polo'][s]['eval'] for s in seeds):.1f}, "
          f"reference {min(results['reference'][s]['eval'] for s in seeds):.1f} (threshold > -400)")
    print("\n## training return at 25k-step marks (mean of the iterations ending in the 25k steps up to the mark)")
    print("| seed | impl | " + " | ".join(f"{m // 1000}k" for m in marks) + " |")
    print("|---|---|" + "---|" * len(marks))
    for seed in seeds:
        for name in ("polo", "reference"):
            vals = at_marks(results[name][seed]["curve"], total)
            print(f"| {seed} | {name} | " + " | ".join(fmt(v) for v in vals) + " |")
    png = Path(args.png)
    plot(results, total, png)
    print(f"\ncurves: {png.resolve()}")


if __name__ == "__main__":
    main()
