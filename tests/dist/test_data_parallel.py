"""Data-parallel learners (polo.dist.data_parallel): 2 gloo ranks give the single-process gradient, train and
resume through ``torchrun`` with rank 0 alone writing the run folder, and refuse what they cannot do."""
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from safetensors.torch import load_file

from polo.core.aggregation import AGGREGATIONS
from polo.core.batch import RolloutBatch
from polo.core.registry import DIVERGENCES, POLICY_LOSSES, ConfigError
from polo.dist.data_parallel import DataParallel, process_group_backend
from polo.policy.policy import Policy, ValueModel
from polo.roles.base import ROLES
from polo.policy.tiny import TinyModelConfig, build_tiny_model
from polo.policy.tokenizer import build_char_tokenizer
from polo.engines.base import Rollouts
from polo.train.checkpoint import latest_checkpoint
from polo.train.critics import Critics
from polo.train.metrics import read_metrics
from polo.train.update import LossTerms, Updater, UpdateSettings

WORLD = 2
TIMEOUT_S = 240
PROMPTS = ["1+2=", "13+4=", "5+60=", "7+7="]
G, T = 4, 6

DEFAULT = {"loss": "ppo_clip", "aggregation": "token_mean", "whole_groups": False, "micro_batch_size": None,
           "critic": False, "live_groups": None, "off_policy": 0.3}
SCENARIOS = {
    "ppo_clip": {},
    "ppo_clip_critic": {"aggregation": "seq_mean_token_mean", "critic": True},
    "drpo_whole_groups": {"loss": "drpo", "whole_groups": True, "off_policy": 0.0},
    "aligned_micro_batches": {"micro_batch_size": 8, "critic": True},
    "rank1_has_no_rows": {"whole_groups": True, "live_groups": [0]},
    "no_rows_at_all": {"whole_groups": True, "live_groups": []},
}
"""Settings that differ from ``DEFAULT``. Rows are cut 8 | 8 over the 2 ranks; ``aligned_micro_batches`` cuts
one process's batch at the same place, so its gradient and metrics must agree to the last bit; with skipped
zero-advantage rows, only group 0 (rank 0's share) or nothing is left to train. DRPO runs on-policy: its
trust-region multiplier is computed per micro-batch (so off-policy it changes with any cut, one process's too)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_env(rank: int, world: int, port: int) -> None:
    """What torchrun sets in each rank's environment."""
    os.environ.update({"WORLD_SIZE": str(world), "RANK": str(rank), "LOCAL_RANK": str(rank),
                       "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})


def spawn(fn, *args) -> None:
    """``fn(rank, *args)`` on ``WORLD`` processes; a failure or a hang past ``TIMEOUT_S`` kills them all."""
    context = mp.start_processes(fn, args=args, nprocs=WORLD, join=False, start_method="spawn")
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while not context.join(timeout=1.0):
            assert time.monotonic() < deadline, f"ranks still running after {TIMEOUT_S} s"
    finally:
        for process in context.processes:
            if process.is_alive():
                process.kill()


# ---------------------------------------------------------------------------------------------- gradients
def tiny_policy() -> Policy:
    torch.manual_seed(0)
    cfg = TinyModelConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64)
    tokenizer = build_char_tokenizer()
    return Policy(build_tiny_model(cfg, tokenizer), tokenizer)


def fixed_batch(policy: Policy, live_groups: list[int] | None, off_policy: float) -> RolloutBatch:
    """4 groups of 4 random responses with random advantages, values and returns; behaviour log-probs off by
    ``off_policy`` × noise so that some ratios clip."""
    B = len(PROMPTS) * G
    g = torch.Generator().manual_seed(0)
    prompt_ids, prompt_mask = policy.encode_prompts([p for p in PROMPTS for _ in range(G)])
    response_ids = torch.randint(3, 20, (B, T), generator=g)
    response_mask = (torch.arange(T) < torch.randint(1, T + 1, (B, 1), generator=g)).long()
    with torch.no_grad():
        logp = policy.forward_logp(prompt_ids, prompt_mask, response_ids, response_mask)["logp"]
    old_logp = logp + off_policy * torch.randn(B, T, generator=g)
    group = torch.arange(len(PROMPTS)).repeat_interleave(G)
    advantages = torch.randn(B, 1, generator=g).expand(B, T).clone()
    if live_groups is not None:
        advantages[~torch.isin(group, torch.tensor(live_groups, dtype=torch.long))] = 0.0
    correct = (torch.rand(B, generator=g) < 0.5).float()
    return RolloutBatch(prompt_ids=prompt_ids, prompt_mask=prompt_mask, response_ids=response_ids,
                        response_mask=response_mask, group=group, rewards=correct[:, None], old_logp=old_logp,
                        advantages=advantages, values=torch.randn(B, T, generator=g),
                        returns=torch.randn(B, T, generator=g), extras={"correct": correct})


def flat_grad(params, full=lambda tensor: tensor) -> torch.Tensor:
    """Every parameter's gradient flattened and concatenated (0 where none); ``full`` gathers a shard whole."""
    return torch.cat([full(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in params])


def one_update(data_parallel: DataParallel | None, scenario: str, shard=None, full=lambda tensor: tensor) -> dict:
    """The policy and critic gradients of the one optimizer step the real updater takes, and its metrics;
    ``shard(policy, critic or None)`` shards the models first (the updater then runs in lockstep) and ``full``
    gathers their gradients whole."""
    c = {**DEFAULT, **SCENARIOS[scenario]}
    policy = tiny_policy()
    value = ValueModel.from_policy(policy) if c["critic"] else None
    if shard is not None:
        shard(policy, value)
    critics = Critics([("critic", ROLES.build("critic"), value)] if value is not None else [], 1.0)
    terms = LossTerms(POLICY_LOSSES.build(c["loss"]), AGGREGATIONS.build(c["aggregation"]), DIVERGENCES.build("k3"))
    settings = UpdateSettings(micro_batch_size=c["micro_batch_size"], max_new_tokens=T,
                              whole_groups=c["whole_groups"], skip_zero_advantage_rows=True)
    updater = Updater(policy, torch.optim.SGD(policy.parameters(), lr=0.0), terms, critics, settings,
                      torch.Generator().manual_seed(0), data_parallel=data_parallel, lockstep=shard is not None)
    got = {}
    updater.optimizer_step = lambda factor: got.update(policy=flat_grad(updater.params, full))
    if value is not None:
        critics.step = lambda: got.update(critic=flat_grad(critics.parameters(), full)) or 0
    got["metrics"] = updater.run(fixed_batch(policy, c["live_groups"], c["off_policy"]))
    return got


def fake_generate(examples: list[int], indices: list[int], generator: torch.Generator) -> Rollouts:
    """G rows per example with random response tokens drawn from ``generator``."""
    n = len(examples) * G
    ones = torch.ones(n, 3, dtype=torch.long)
    batch = RolloutBatch(prompt_ids=ones, prompt_mask=ones, response_mask=ones,
                         response_ids=torch.randint(3, 20, (n, 3), generator=generator),
                         group=torch.arange(len(examples)).repeat_interleave(G), rewards=torch.zeros(n, 1))
    repeated = [e for e in examples for _ in range(G)]
    return Rollouts(batch, [f"completion of {e}" for e in repeated], repeated)


def worker(rank: int, port: int, out: Path) -> None:
    """Inside a process group the caller initialised (the Python API's way): the updates of every scenario, a
    sharded rollout of 5 prompts (2 | 3) and a sharded evaluation of 7 examples."""
    torch.set_num_threads(int(os.environ.get("POLO_TEST_THREADS", "1")))
    os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    try:
        group = DataParallel.from_environment("gloo")
        assert (group.rank, group.world, group.owned) == (rank, WORLD, False)
        got = {name: one_update(group, name) for name in SCENARIOS}
        generator = torch.Generator().manual_seed(0)
        got["rollouts"] = group.rollout(fake_generate, [10, 11, 12, 13, 14], [0, 1, 2, 3, 4], generator)
        got["generator"] = generator.get_state()
        got["accuracy"] = group.evaluate(lambda examples: sum(e % 2 for e in examples) / len(examples), list(range(7)))
        torch.save(got, out / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    out = tmp_path_factory.mktemp("dp_grads")
    spawn(worker, free_port(), out)
    return [torch.load(out / f"rank{r}.pt", weights_only=False) for r in range(WORLD)]


def equal_to_one_process(two_ranks: list[dict], scenario: str) -> tuple[dict, dict]:
    """Both ranks hold the same gradients and metrics, within ‖g₂ − g₁‖/‖g₁‖ ≤ 1e-6 of one process's (all zero when
    no row trains); returns one process's result and rank 0's."""
    single = one_update(None, scenario)
    rank0, rank1 = (r[scenario] for r in two_ranks)
    for part in ("policy", "critic"):
        if part not in single:
            continue
        assert torch.equal(rank0[part], rank1[part]), f"{part}: ranks hold different gradients"
        if scenario == "no_rows_at_all":
            assert not single[part].any() and not rank0[part].any()
            continue
        assert single[part].norm() > 0
        error = relative_error(rank0[part], single[part])
        assert error <= 1e-6, f"{part}: relative error {error:.2e}"
    assert rank0["metrics"] == rank1["metrics"]
    assert rank0["metrics"].keys() == single["metrics"].keys()
    return single, rank0


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_two_rank_gradient_equals_one_process_gradient(two_ranks, scenario, f32):
    """‖g₂ − g₁‖/‖g₁‖ ≤ 1e-6: each rank sums its rows' gradients, gloo adds the two parts. In float32 the ranks'
    forward passes over 8 rows instead of 16 may round differently (another matmul blocking), a few ulps per
    element (measured 1e-7 to 2.5e-7 relative); with micro-batches cut where the ranks cut, the sums are the same
    additions and the gradients are equal bit for bit."""
    single, rank0 = equal_to_one_process(two_ranks, scenario)
    if scenario == "aligned_micro_batches":
        for part in ("policy", "critic"):
            assert torch.equal(rank0[part], single[part])
    if scenario == "aligned_micro_batches":  # the same micro-batches: the same diagnostics
        assert rank0["metrics"] == pytest.approx(single["metrics"], rel=1e-12)
    # token means agree whatever the cut, to float32's rounding of a mean of B·T terms of magnitude ≤ ln V
    # (entropy) or ≤ max|log ratio| ≈ 1.5 (kl_old); the other diagnostics are per micro-batch
    for key, magnitude in (("policy/entropy", 5.0), ("policy/kl_old", 1.5)):
        if key in single["metrics"]:
            assert rank0["metrics"][key] == pytest.approx(single["metrics"][key], abs=f32.atol(magnitude, 16 * T))


def test_rollouts_are_sharded_then_gathered_in_order(two_ranks):
    """Every rank holds the same full rollouts in prompt order with groups 0..4; each rank sampled its shard
    from its own stream, and the shared generator advanced alike on both."""
    first, second = (r["rollouts"] for r in two_ranks)
    assert first.examples == second.examples == [e for e in [10, 11, 12, 13, 14] for _ in range(G)]
    assert first.completions == second.completions
    assert torch.equal(first.batch.group, torch.arange(5).repeat_interleave(G))
    assert torch.equal(first.batch.response_ids, second.batch.response_ids)
    assert not torch.equal(first.batch.response_ids[:2 * G], first.batch.response_ids[2 * G: 4 * G])
    assert torch.equal(two_ranks[0]["generator"], two_ranks[1]["generator"])


def test_sharded_evaluation_counts_every_example_once(two_ranks):
    assert two_ranks[0]["accuracy"] == two_ranks[1]["accuracy"] == pytest.approx(3 / 7, rel=1e-12)


# ---------------------------------------------------------------------------------------------- bad settings
def test_bad_launch_environments_are_named(monkeypatch):
    # an in-process vLLM engine built earlier in this process initialises a one-process group: not this test's
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: False)
    for name in ("RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ConfigError, match="WORLD_SIZE=2 but RANK is not set: launch .* `torchrun"):
        DataParallel.from_environment()
    monkeypatch.setenv("RANK", "2")
    with pytest.raises(ConfigError, match=r"RANK=2 is outside 0\.\.1"):
        DataParallel.from_environment()
    monkeypatch.setenv("RANK", "one")
    with pytest.raises(ConfigError, match="RANK='one' is not an integer"):
        DataParallel.from_environment()
    monkeypatch.setenv("RANK", "1")
    with pytest.raises(ConfigError, match="MASTER_ADDR and MASTER_PORT not set"):
        DataParallel.from_environment()
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert DataParallel.from_environment().world == 1  # one process: nothing to join


def test_what_data_parallel_cannot_do_is_refused():
    two = DataParallel(rank=0, world=2)
    hook = type("Hook", (), {"registry_name": "oblr_snr"})()  # stands in for OBLR-PO's hook
    with pytest.raises(ConfigError, match="optimizer_hook 'oblr_snr' needs K gradient estimates"):
        two.check({"optimizer_hook": hook}, "local")
    with pytest.raises(ConfigError, match="dist.backend=ray with a data-parallel learner"):
        two.check({}, "ray")
    DataParallel().check({"optimizer_hook": hook}, "ray")  # one process: allowed
    with pytest.raises(ConfigError, match="nccl reduces gradients on the GPU, but the policy is on cpu"):
        DataParallel(rank=0, world=2, backend="nccl").check_device(torch.device("cpu"))
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="learner_backend=nccl needs CUDA"):
            process_group_backend("nccl")
    assert process_group_backend("gloo") == "gloo"


def test_shards_cover_every_row_once_and_keep_groups_whole():
    group = torch.tensor([0, 0, 0, 1, 2, 2, 2, 2, 3])
    for whole in (False, True):
        shards = [DataParallel(rank=r, world=3).shard_rows(group, whole) for r in range(3)]
        assert torch.equal(torch.cat(shards), torch.arange(len(group)))
        if whole:
            assert not set(group[shards[0]].tolist()) & set(group[torch.cat(shards[1:])].tolist())
            assert not set(group[shards[1]].tolist()) & set(group[shards[2]].tolist())
    assert [DataParallel(rank=r, world=4).bounds(3) for r in range(4)] == [(0, 0), (0, 1), (1, 2), (2, 3)]


# ---------------------------------------------------------------------------------------------- torchrun
STEPS = 4


def torchrun(*args) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={WORLD}",
            f"--master_port={free_port()}", "-m", "polo.cli", "train", *args]


def train_args(run_dir, tiny) -> list[str]:
    return ["grpo", f"--run-dir={run_dir}", *tiny, f"train.steps={STEPS}", "train.save_every=2",
            "train.eval_every=2"]


def run_to_end(cmd) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, env=dict(os.environ), capture_output=True, text=True, timeout=TIMEOUT_S)
    assert done.returncode == 0, done.stderr[:6000]  # the ranks' errors come before torchrun's summary
    return done


def workers(launcher: int) -> dict[int, int]:
    """``{rank: pid}`` of the torchrun ``launcher``'s worker processes (read from /proc)."""
    found = {}
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == launcher:
                env = dict(v.split("=", 1) for v in (entry / "environ").read_text().split("\0") if "=" in v)
                if "RANK" in env:
                    found[int(env["RANK"])] = int(entry.name)
        except (OSError, ValueError, IndexError):
            continue
    return found


def kill_rank_1_after_checkpoint(cmd: list[str], run_dir: Path, step: int = 2) -> None:
    """Launch the torchrun command ``cmd`` and SIGKILL its rank 1 once ``run_dir`` has checkpoint ``step``; torchrun
    then stops rank 0 and exits with an error."""
    launcher = subprocess.Popen(cmd, env=dict(os.environ), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while not (run_dir / "checkpoints" / f"step_{step:06d}").exists():
            assert launcher.poll() is None, "run ended before it could be killed"
            assert time.monotonic() < deadline
            time.sleep(0.05)
        os.kill(workers(launcher.pid)[1], signal.SIGKILL)
        assert launcher.wait(timeout=TIMEOUT_S) != 0
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()


def deterministic(rows):
    return [{k: v for k, v in r.items() if not k.startswith(("time/", "perf/", "elapsed"))} for r in rows]


@pytest.mark.slow  # multi-process kill and resume: deselected by the README's test command, CI runs it in its own pass
def test_torchrun_trains_writes_from_rank_0_and_resumes_after_a_kill(tmp_path, tiny):
    """A 2-rank run writes one metrics.jsonl and its checkpoints from rank 0; a 2-rank run whose rank 1 is
    SIGKILLed after its first checkpoint, resumed with ``--resume``, ends with the same weights and metrics."""
    full, killed = tmp_path / "full", tmp_path / "killed"
    done = run_to_end(torchrun(*train_args(full, tiny)))
    rows = read_metrics(full)
    assert [r["step"] for r in rows] == list(range(STEPS + 1))  # one writer: each step once
    assert sorted(p.name for p in (full / "checkpoints").iterdir()) == ["step_000002", "step_000004"]
    assert done.stderr.count("run folder:") == 1  # only rank 0 logs

    kill_rank_1_after_checkpoint(torchrun(*train_args(killed, tiny)), killed)
    assert latest_checkpoint(killed).name != f"step_{STEPS:06d}"
    run_to_end(torchrun("--resume", str(killed)))

    a = load_file(str(latest_checkpoint(full) / "policy.safetensors"))
    b = load_file(str(latest_checkpoint(killed) / "policy.safetensors"))
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
    assert deterministic(read_metrics(full)) == deterministic(read_metrics(killed))
