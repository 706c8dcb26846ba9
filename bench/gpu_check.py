"""GPU check: vLLM generation and polo training on a randomly initialised ~0.5B Qwen2-shaped model, and the
NCCL learner path. One command, a few minutes on one GPU; it prints tokens/s and GPU memory.

The model: Qwen2-0.5B's width (hidden 896, 14 query heads, 2 KV heads, MLP 4864, rope θ 1e6) with 32 layers
and polo's character vocabulary, built from a config (no download): 0.48B parameters, saved as a local
checkpoint folder. Untrained, it rarely emits EOS, so every completion runs to its token cap and the work per
call is fixed.

1. vLLM (bfloat16): 64 prompts × 8 samples × 256 tokens per call, after one warm-up call; the weight push
   (``VLLMGenerator.sync``); on a GPU, sleep mode (``engine.vllm.sleep``): the memory ``before_update`` frees and
   the wake + push; the log-prob gap between vLLM (after that sleep) and the trainer's bfloat16 forward.
2. polo's own KV-cache sampler on the same GPU, a quarter of that work, for the ratio.
3. Training: ``polo train grpo_vllm`` on the checkpoint (model.device=cuda, model.dtype=bfloat16, gradient
   checkpointing), 32 prompts × 8 × 128 tokens per step; update tokens/s and peak memory. Then the same in server
   mode (``engine.vllm.mode=server``: a vLLM server polo starts on the same GPU), with the push's share of a step.
4. The NCCL learner: ``torchrun --nproc_per_node 1`` with ``dist.learner_backend=nccl`` (one GPU: NCCL with one
   rank checks the process-group path, not a speed-up).

    python bench/gpu_check.py            # on a machine with a GPU and polo[vllm]
    python bench/gpu_check.py --smoke    # the same code path on a CPU with a 2-layer model (checks the script)
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
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


def generation(folder: Path, device: str, prompts: int, samples: int, tokens: int) -> None:
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
    print(f"vLLM generation: {len(ids)} rows x {tokens} tokens: {seconds:.2f} s/call, {made / seconds:,.0f} tokens/s")
    sync_seconds, _ = timed(lambda: served.sync(policy, 1), 3)
    print(f"vLLM weight push (full weights, in-process): {sync_seconds * 1000:.0f} ms")
    if sleep:
        free = torch.cuda.mem_get_info()[0]
        served.before_update()
        freed = torch.cuda.mem_get_info()[0] - free
        wake_seconds, _ = timed(lambda: served.sync(policy, 2), 1)
        print(f"vLLM sleep (level 2): {freed / 2**30:.1f} GiB freed; wake + push {wake_seconds * 1000:.0f} ms")
        out = vllm_call()
    with torch.no_grad():
        recomputed = policy.forward_logp(ids.to(policy.device), mask.to(policy.device), out.response_ids,
                                         out.response_mask)["logp"]
    m = out.response_mask.bool()
    gap = (recomputed - out.logp)[m]
    k3 = (gap.exp() - 1 - gap).mean()
    print(f"log-prob gap vLLM vs trainer (bfloat16): mean |d| {gap.abs().mean():.4f}, max |d| {gap.abs().max():.3f}, "
          f"k3 {k3:.2e}")
    quarter = slice(0, len(ids) // 4)
    seconds, out = timed(lambda: sample(policy, ids[quarter], mask[quarter], max_new_tokens=tokens,
                                        generator=generator), 1)
    print(f"polo sampler (HF KV cache, bfloat16 autocast): {len(ids) // 4} rows: "
          f"{int(out.response_mask.sum()) / seconds:,.0f} tokens/s")
    print(f"GPU memory after generation: {gpu_memory()}")
    served.close()


def training(folder: Path, device: str, steps: int, prompts: int, tokens: int, out_dir: Path, mode: str) -> None:
    cmd = [sys.executable, "-m", "polo.cli", "train", "grpo_vllm", f"model.path={folder}", f"model.device={device}",
           "model.dtype=bfloat16", "train.gradient_checkpointing=true", f"train.steps={steps}",
           f"rollout.prompts_per_step={prompts}", f"rollout.max_new_tokens={tokens}", "optim.lr=1e-6",
           "train.skip_zero_advantage_rows=false", "train.eval_size=32", "train.eval_every=1000",
           "train.save_every=1000", f"output_dir={out_dir}", "engine.vllm.gpu_memory_utilization=0.3",
           f"engine.vllm.mode={mode}"]
    subprocess.run(cmd, check=True)
    rows = [json.loads(line) for line in next(out_dir.glob("*/metrics.jsonl")).read_text().splitlines()][2:]
    update = statistics.median(r["time/update"] for r in rows)
    sample_s = statistics.median(r["time/sample"] for r in rows)
    tokens_per_step = prompts * 8 * tokens
    hooks = statistics.median(r["time/hooks"] for r in rows)  # the weight push
    print(f"training step, vLLM {mode} ({prompts} prompts x 8 x {tokens} tokens, median of {len(rows)}): sample "
          f"{sample_s:.2f} s, update {update:.2f} s = {tokens_per_step / update:,.0f} tokens/s (4 minibatches, bf16 "
          f"autocast, gradient checkpointing), push and hooks {hooks:.2f} s")


def nccl_learner(folder: Path, device: str, out_dir: Path) -> None:
    backend = "nccl" if device.startswith("cuda") else "gloo"
    cmd = ["torchrun", "--nproc_per_node", "1", "-m", "polo.cli", "train", "grpo", f"model.path={folder}",
           f"model.device={device}", "model.dtype=bfloat16", f"dist.learner_backend={backend}", "train.steps=3",
           "rollout.prompts_per_step=8", "rollout.max_new_tokens=32", "train.eval_size=16", f"output_dir={out_dir}"]
    start = time.perf_counter()
    subprocess.run(cmd, check=True)
    print(f"{backend} learner (torchrun, 1 rank): 3 steps in {time.perf_counter() - start:.0f} s including start-up")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="CPU, a 2-layer model: check the script itself")
    args = parser.parse_args()
    if not args.smoke and not torch.cuda.is_available():
        sys.exit("no GPU here: run with --smoke to check the script on a CPU")
    device = "cpu" if args.smoke else "cuda"
    size = (8, 4, 16) if args.smoke else (64, 8, 256)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "qwen2_random"
        n = build_checkpoint(folder, SHAPES["smoke" if args.smoke else "gpu"])
        name = torch.cuda.get_device_name() if torch.cuda.is_available() else "CPU"
        print(f"device: {name}; torch {torch.__version__}; model: Qwen2 shape, {n / 1e6:,.1f}M parameters")
        generation(folder, device, *size)
        for mode in ("colocate", "server"):
            training(folder, device, 4 if args.smoke else 6, 4 if args.smoke else 32, 16 if args.smoke else 128,
                     Path(tmp) / f"train_{mode}", mode)
        nccl_learner(folder, device, Path(tmp) / "nccl")
        print(f"GPU memory at the end: {gpu_memory()}")


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
