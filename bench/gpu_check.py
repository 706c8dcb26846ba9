"""GPU check: vLLM generation, polo training (replicated and FSDP-sharded, packed and padded rows) and TRL's
GRPOTrainer on a randomly initialised ~0.5B Qwen2-shaped model, and the NCCL learner path. One command, under
8 minutes on one GPU; it prints each figure and writes them all to a JSON file (``--out``).

The model: Qwen2-0.5B's width (hidden 896, 14 query heads, 2 KV heads, MLP 4864, rope θ 1e6) with 32 layers
and polo's character vocabulary, built from a config (no download): 0.48B parameters, saved as a local
checkpoint folder. Untrained, it rarely emits EOS, so every completion runs to its token cap and the work per
call is fixed.

1. vLLM (bfloat16): 64 prompts × 8 samples × 256 tokens per call, after one warm-up call; the weight push
   (``VLLMGenerator.sync``); on a GPU, sleep mode (``engine.vllm.sleep``): the memory ``before_update`` frees and
   the wake + push; the log-prob gap between vLLM (after that sleep) and the trainer's bfloat16 forward.
2. polo's own KV-cache sampler on the same GPU, a quarter of that work, for the ratio.
3. Training: ``polo train grpo_vllm`` on the checkpoint (model.device=cuda, model.dtype=bfloat16, gradient
   checkpointing), 32 prompts × 8 × 128 tokens per step, with ``train.pack_rows`` true and false: update
   tokens/s and the packed / padded update-time ratio; then in server mode (``engine.vllm.mode=server``: a vLLM
   server polo starts on the same GPU), with the push's share of a step (``time/hooks``).
4. The sharded learner: ``torchrun --nproc_per_node 1`` with ``dist.shard=fsdp`` (bf16 mixed precision,
   float32 shards) and, the same way, ``dist.learner_backend=nccl`` replicated (one GPU: the process-group paths,
   not a speed-up); update time and peak GPU memory of each (read from the run's metrics).
5. TRL 1.16's GRPOTrainer (``pip install 'polo[bench]'``; skipped without it) on the same model folder and
   shapes, bf16, no vLLM, for the polo / TRL update-time ratio.

    python bench/gpu_check.py --out gpu_check.json   # on a machine with a GPU and polo[vllm]
    python bench/gpu_check.py --smoke                # the same code path on a CPU with a 2-layer model
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from polo.policy.policy import Policy
from polo.policy.tokenizer import build_char_tokenizer
from polo.engines.sampler import sample
from polo.engines.vllm_generator import VLLMGenerator, VLLMSettings
from polo.tasks import build_task

SHAPES = {
    "gpu": {"hidden_size": 896, "num_hidden_layers": 32, "num_attention_heads": 14, "num_key_value_heads": 2,
            "intermediate_size": 4864},
    "smoke": {"hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1,
              "intermediate_size": 256},
}


def build_checkpoint(folder: Path, shape: dict) -> int:
    """A random Qwen2-shaped model with the char tokenizer, saved in bfloat16; its parameter count."""
    tokenizer = build_char_tokenizer()
    config = Qwen2Config(vocab_size=len(tokenizer), max_position_embeddings=1024, rope_theta=1e6,
                         tie_word_embeddings=True, pad_token_id=tokenizer.pad_token_id,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, **shape)
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config).to(torch.bfloat16)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return sum(p.numel() for p in model.parameters())


def timed(fn, repeats: int) -> tuple[float, object]:
    """Median seconds of ``repeats`` calls (CUDA synchronised) and the last result."""
    seconds, out = [], None
    for _ in range(repeats):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        start = time.perf_counter()
        out = fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds), out


def gpu_memory() -> str:
    if not torch.cuda.is_available():
        return "n/a (CPU)"
    free, total = torch.cuda.mem_get_info()
    return (f"{(total - free) / 2**30:.1f} GiB in use of {total / 2**30:.0f} GiB (this process's torch peak "
            f"{torch.cuda.max_memory_allocated() / 2**30:.1f} GiB)")


def generation(folder: Path, device: str, prompts: int, samples: int, tokens: int) -> dict:
    policy = Policy.load(folder, device=device, compute_dtype=torch.bfloat16)
    examples = build_task({"name": "addition"}).examples("test", prompts, seed=0)
    ids, mask = policy.encode_prompts(examples)
    ids, mask = ids.repeat_interleave(samples, 0), mask.repeat_interleave(samples, 0)
    sleep = device.startswith("cuda")  # vLLM has no sleep mode on a CPU
    served = VLLMGenerator(VLLMSettings(dtype="bfloat16", gpu_memory_utilization=0.35, sleep=sleep), policy)
    generator = torch.Generator().manual_seed(0)

    def vllm_call():
        return served.generate(policy, ids, mask, max_new_tokens=tokens, generator=generator)

    vllm_call()  # warm-up
    seconds, out = timed(vllm_call, 3)
    made = int(out.response_mask.sum())
    figures = {"vllm_rows": len(ids), "vllm_tokens_per_s": made / seconds}
    print(f"vLLM generation: {len(ids)} rows x {tokens} tokens: {seconds:.2f} s/call, {made / seconds:,.0f} tokens/s")
    sync_seconds, _ = timed(lambda: served.sync(policy, 1), 3)
    figures["vllm_weight_push_s"] = sync_seconds
    print(f"vLLM weight push (full weights, in-process): {sync_seconds * 1000:.0f} ms")
    if sleep:
        free = torch.cuda.mem_get_info()[0]
        served.before_update()
        freed = torch.cuda.mem_get_info()[0] - free
        wake_seconds, _ = timed(lambda: served.sync(policy, 2), 1)
        figures.update(vllm_sleep_freed_gib=freed / 2**30, vllm_wake_and_push_s=wake_seconds)
        print(f"vLLM sleep (level 2): {freed / 2**30:.1f} GiB freed; wake + push {wake_seconds * 1000:.0f} ms")
        out = vllm_call()
    with torch.no_grad():
        recomputed = policy.forward_logp(ids.to(policy.device), mask.to(policy.device), out.response_ids,
                                         out.response_mask)["logp"]
    m = out.response_mask.bool()
    gap = (recomputed - out.logp)[m]
    k3 = (gap.exp() - 1 - gap).mean()
    figures.update(logp_gap_mean_abs=float(gap.abs().mean()), logp_gap_k3=float(k3))
    print(f"log-prob gap vLLM vs trainer (bfloat16): mean |d| {gap.abs().mean():.4f}, max |d| {gap.abs().max():.3f}, "
          f"k3 {k3:.2e}")
    quarter = slice(0, len(ids) // 4)
    seconds, out = timed(lambda: sample(policy, ids[quarter], mask[quarter], max_new_tokens=tokens,
                                        generator=generator), 1)
    figures["polo_sampler_tokens_per_s"] = int(out.response_mask.sum()) / seconds
    print(f"polo sampler (HF KV cache, bfloat16 autocast): {len(ids) // 4} rows: "
          f"{figures['polo_sampler_tokens_per_s']:,.0f} tokens/s")
    print(f"GPU memory after generation: {gpu_memory()}")
    served.close()
    return figures


def run_metrics(cmd: list[str], out_dir: Path) -> tuple[list[dict], float]:
    """Run a ``polo train`` command line: its metrics rows after the first two (start-up and the first step),
    and the GPU's peak memory in use while it ran (GiB, sampled every 0.2 s; 0 on a CPU)."""
    peak, done = [0.0], threading.Event()

    def watch():
        while not done.wait(0.2):
            if torch.cuda.is_available():
                free, total = torch.cuda.mem_get_info()
                peak[0] = max(peak[0], (total - free) / 2**30)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        subprocess.run(cmd, check=True)
    finally:
        done.set()
        watcher.join()
    rows = [json.loads(line) for line in next(out_dir.glob("*/metrics.jsonl")).read_text().splitlines()]
    return rows[2:] or rows[-1:], peak[0]


def step_figures(run: tuple[list[dict], float], tokens_per_step: int) -> dict:
    rows, peak = run
    update = statistics.median(r["time/update"] for r in rows)
    return {"update_s": update, "sample_s": statistics.median(r["time/sample"] for r in rows),
            "update_tokens_per_s": tokens_per_step / update, "push_and_hooks_s": statistics.median(
                r["time/hooks"] for r in rows), "peak_gpu_gib_in_use": peak}


def training(folder: Path, device: str, steps: int, prompts: int, tokens: int, out_dir: Path) -> dict:
    figures = {}
    for name, mode, pack in (("pack_true", "colocate", "true"), ("pack_false", "colocate", "false"),
                             ("server", "server", "auto")):
        where = out_dir / name
        cmd = [sys.executable, "-m", "polo.cli", "train", "grpo_vllm", f"model.path={folder}",
               f"model.device={device}", "model.dtype=bfloat16", "train.gradient_checkpointing=true",
               f"train.steps={steps}", f"rollout.prompts_per_step={prompts}", f"rollout.max_new_tokens={tokens}",
               "optim.lr=1e-6", "train.skip_zero_advantage_rows=false", "train.eval_size=32",
               "train.eval_every=1000", "train.save_every=1000", f"output_dir={where}",
               "engine.vllm.gpu_memory_utilization=0.3", f"train.pack_rows={pack}", f"engine.vllm.mode={mode}"]
        f = figures[f"polo_step_{name}"] = step_figures(run_metrics(cmd, where), prompts * 8 * tokens)
        print(f"training step, vLLM {mode}, pack_rows={pack} ({prompts} prompts x 8 x {tokens} tokens): sample "
              f"{f['sample_s']:.2f} s, update {f['update_s']:.2f} s = {f['update_tokens_per_s']:,.0f} tokens/s, "
              f"push and hooks {f['push_and_hooks_s']:.2f} s")
    figures["packed_over_padded_update"] = (figures["polo_step_pack_true"]["update_s"]
                                            / figures["polo_step_pack_false"]["update_s"])
    print(f"packed / padded update time: {figures['packed_over_padded_update']:.3f}")
    return figures


def one_rank_learners(folder: Path, device: str, out_dir: Path) -> dict:
    """``torchrun`` with one rank: the sharded learner (bf16 FSDP) and the replicated NCCL one."""
    figures = {}
    backend = "nccl" if device.startswith("cuda") else "gloo"
    for name, extra in (("fsdp", ["dist.shard=fsdp", "dist.fsdp.mixed_precision=bf16" if backend == "nccl"
                                  else "dist.fsdp.mixed_precision=none"]), ("replicated", [])):
        where = out_dir / name
        cmd = ["torchrun", "--nproc_per_node", "1", "-m", "polo.cli", "train", "grpo", f"model.path={folder}",
               f"model.device={device}", "model.dtype=bfloat16", f"dist.learner_backend={backend}", "train.steps=4",
               "rollout.prompts_per_step=8", "rollout.max_new_tokens=64", "train.eval_size=16",
               "train.eval_every=1000", "train.save_every=4", f"output_dir={where}", *extra]
        start = time.perf_counter()
        figures[name] = {**step_figures(run_metrics(cmd, where), 8 * 8 * 64),
                         "wall_s_with_startup": time.perf_counter() - start}
        print(f"{name} learner ({backend}, torchrun, 1 rank): update {figures[name]['update_s']:.2f} s, "
              f"{figures[name]['wall_s_with_startup']:.0f} s with start-up")
    return figures


def trl_step(folder: Path, device: str, prompts: int, tokens: int, steps: int) -> dict:
    """TRL's GRPOTrainer on the same folder and shapes (bf16 on the GPU, no vLLM): median step seconds."""
    try:
        import trl  # noqa: F401
    except ImportError:
        print("TRL not installed (pip install 'polo[bench]'): skipped")
        return {}
    sys.path.insert(0, str(Path(__file__).parent))
    from common import Setting, trl_trainer

    setting = Setting(f"{prompts}x8 <={tokens} tok", prompts, 8, tokens, eos_prob=None)
    config = {"use_cpu": device == "cpu", "bf16": device != "cpu", "gradient_checkpointing": True}
    trainer = trl_trainer(folder, setting, steps, config=config)
    trainer.train()
    step = statistics.median(trainer.step_times[1:] or trainer.step_times)
    print(f"TRL GRPOTrainer step ({prompts} prompts x 8 x {tokens} tokens): {step:.2f} s")
    return {"trl_step_s": step}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="CPU, a 2-layer model: check the script itself")
    parser.add_argument("--out", type=Path, default=Path("gpu_check.json"), help="the JSON of figures")
    args = parser.parse_args()
    if not args.smoke and not torch.cuda.is_available():
        sys.exit("no GPU here: run with --smoke to check the script on a CPU")
    device = "cpu" if args.smoke else "cuda"
    size = (8, 4, 16) if args.smoke else (64, 8, 256)
    steps, prompts, tokens = (3, 4, 16) if args.smoke else (5, 32, 128)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "qwen2_random"
        n = build_checkpoint(folder, SHAPES["smoke" if args.smoke else "gpu"])
        name = torch.cuda.get_device_name() if torch.cuda.is_available() else "CPU"
        print(f"device: {name}; torch {torch.__version__}; model: Qwen2 shape, {n / 1e6:,.1f}M parameters")
        figures = {"device": name, "torch": torch.__version__, "parameters": n}
        figures["generation"] = generation(folder, device, *size)
        figures["training"] = training(folder, device, steps, prompts, tokens, Path(tmp) / "train")
        figures["one_rank_learners"] = one_rank_learners(folder, device, Path(tmp) / "learners")
        figures["trl"] = trl_step(folder, device, prompts, tokens, steps)
        if figures["trl"]:
            step = figures["training"]["polo_step_pack_true"]
            figures["trl_over_polo_step"] = figures["trl"]["trl_step_s"] / (step["update_s"] + step["sample_s"])
            print(f"TRL / polo step time: {figures['trl_over_polo_step']:.2f}")
        figures["peak_gpu_memory"] = gpu_memory()
        print(f"GPU memory at the end: {figures['peak_gpu_memory']}")
    args.out.write_text(json.dumps(figures, indent=2))
    print(f"figures: {args.out}")


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
