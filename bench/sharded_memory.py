"""Per-rank memory of the replicated learner (``dist.shard: replicate``) against the sharded one (``dist.shard: fsdp``)
at 1, 2 and 4 ranks, on a built-in model of ~65M parameters (random weights, no download).

Each configuration runs in fresh processes (gloo ranks on this CPU): the policy built, sharded or not, one
update step (forward and backward of 8 rows, gradients summed over the ranks, clipped AdamW step). Measured per
rank from the tensors themselves: parameters, gradients and AdamW's two moments (bytes of each rank's local
shards), and the process's peak RSS (which adds the libraries and activations). Printed: MB per rank and the
sharded / replicated ratio at the same world size.

    python bench/sharded_memory.py [--ranks 1 2 4]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import sys
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

MB = 1024 * 1024
SHAPE = {"hidden_size": 640, "num_layers": 10, "num_heads": 10, "intermediate_size": 2560}


def local_bytes(tensors) -> int:
    return sum((t.to_local() if hasattr(t, "to_local") else t).nbytes for t in tensors)


def rank_main(rank: int, world: int, port: int, shard: bool, out: str) -> None:
    from polo.dist.data_parallel import DataParallel
    from polo.dist.fsdp import FSDPSettings, ShardedModules, clip_grad_norm
    from polo.policy.policy import Policy
    from polo.policy.tiny import TinyModelConfig, build_tiny_model
    from polo.policy.tokenizer import build_char_tokenizer

    torch.set_num_threads(1)
    os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    tokenizer = build_char_tokenizer()
    policy = Policy(build_tiny_model(TinyModelConfig(**SHAPE), tokenizer), tokenizer)
    n_params = sum(p.numel() for p in policy.parameters())
    if shard:
        ShardedModules(FSDPSettings(), world).shard("policy", policy)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-5)
    g = torch.Generator().manual_seed(rank)
    prompt_ids, prompt_mask = policy.encode_prompts(["12+34="] * 8)
    response_ids = torch.randint(3, 20, (8, 16), generator=g)
    mask = torch.ones_like(response_ids)
    logp = policy.forward_logp(prompt_ids, prompt_mask, response_ids, mask)["logp"]
    (-(logp * mask).sum() / (mask.sum() * world)).backward()
    grads = local_bytes(p.grad for p in policy.parameters())
    if not shard:
        DataParallel(rank, world).all_reduce_grads(list(policy.parameters()))
    clip_grad_norm(list(policy.parameters()), 1.0)
    optimizer.step()
    state = [v for s in optimizer.state.values() for v in s.values() if v.dim() > 0]
    row = {"params": local_bytes(policy.parameters()), "grads": grads, "adam": local_bytes(state),
           "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "n_params": n_params}
    Path(out, f"rank{rank}.json").write_text(json.dumps(row))
    dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def measure(world: int, shard: bool) -> dict:
    """Rank 0's figures (ranks hold equal shards up to one row per parameter) and the largest peak RSS."""
    with tempfile.TemporaryDirectory() as out:
        mp.start_processes(rank_main, args=(world, free_port(), shard, out), nprocs=world, start_method="spawn")
        rows = [json.loads(Path(out, f"rank{r}.json").read_text()) for r in range(world)]
    return {**rows[0], "peak_rss": max(r["peak_rss"] for r in rows)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4])
    args = parser.parse_args()
    print(f"{'ranks':>5} {'learner':>10} {'params MB':>10} {'grads MB':>9} {'AdamW MB':>9} {'total MB':>9} "
          f"{'ratio':>6} {'peak RSS MB':>12}")
    for world in args.ranks:
        replicated = measure(world, False)
        for name, m in (("replicated", replicated), ("fsdp", measure(world, True))):
            total = m["params"] + m["grads"] + m["adam"]
            ratio = total / (replicated["params"] + replicated["grads"] + replicated["adam"])
            print(f"{world:>5} {name:>10} {m['params'] / MB:>10.1f} {m['grads'] / MB:>9.1f} {m['adam'] / MB:>9.1f} "
                  f"{total / MB:>9.1f} {ratio:>6.3f} {m['peak_rss'] / MB:>12.0f}")
    print(f"model: built-in shape {SHAPE}, {replicated['n_params'] / 1e6:.1f}M parameters, float32")


if __name__ == "__main__":
    sys.exit(main())
