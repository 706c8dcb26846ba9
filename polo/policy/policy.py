"""The policy: a Hugging Face causal LM and its tokenizer, plus the PPO critic built from it."""
from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Literal

import torch
from torch import Tensor, nn
from torch.distributed.fsdp import FSDPModule
from torch.distributed.tensor import DTensor
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel

from polo.core.losses.entropy import entropy_from_logits
from polo.core.registry import ConfigError
from polo.policy.inputs import concat_inputs, pad_sequences
from polo.policy.head import response_head_logp
from polo.policy.lora import LoraConfig, apply_lora, base_state_dict, is_lora, load_lora, merged_state_dict
from polo.policy.packing import PackRows, reads_of
from polo.policy.prefix import CachedDecoder, read_after_prompt
from polo.policy.tiny import TinyModelConfig, build_tiny_model
from polo.policy.tokenizer import build_char_tokenizer

if TYPE_CHECKING:
    from polo.tasks.base import Example

ADAPTER_DIR = "adapter"


def token_logp(logits: Tensor, ids: Tensor) -> Tensor:
    """``log softmax(logits)[..., ids]`` without materialising the full log-softmax."""
    return logits.gather(-1, ids.unsqueeze(-1)).squeeze(-1) - logits.logsumexp(-1)


PLAIN_HEAD_MODELS = frozenset({"llama", "mistral", "qwen2", "qwen3"})
"""Hugging Face architectures whose logits are exactly ``lm_head(trunk output)`` (no logit scaling or soft-capping),
so ``Policy.forward_logp`` may apply the head to the response tokens alone (polo.policy.head)."""

DTYPES = {"float32": None, "bfloat16": torch.bfloat16}
"""``model.dtype`` → the autocast dtype of the model calls (None: plain float32)."""


def whole_tensor(tensor: Tensor) -> Tensor:
    """A shard (a DTensor of ``dist.shard: fsdp``) gathered whole (a collective: every rank gathers alike); any
    other tensor as it is."""
    return tensor.full_tensor() if isinstance(tensor, DTensor) else tensor


def whole_items(state: dict[str, Tensor]) -> Iterator[tuple[str, Tensor]]:
    """``state``'s items with each shard gathered whole (``whole_tensor``) as it is reached, so a rank holds at
    most one gathered tensor beyond its shards; detached."""
    for key, tensor in state.items():
        yield key, whole_tensor(tensor).detach()


def whole_state(state: dict[str, Tensor]) -> dict[str, Tensor]:
    """``state`` with every shard gathered whole (``whole_items``); as it is when nothing is sharded."""
    return dict(whole_items(state))


def resolve_device(name: str) -> torch.device:
    """``model.device`` as a torch device; a ConfigError when it names a cuda device this machine lacks."""
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"model.device={name!r}, but torch.cuda.is_available() is false (no GPU, or a CPU-only "
                          f"torch {torch.__version__}): use model.device=cpu, or install a CUDA build of torch")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise ConfigError(f"model.device={name!r}, but this machine has {torch.cuda.device_count()} cuda device(s): "
                          f"expected cuda:0 .. cuda:{torch.cuda.device_count() - 1}")
    return device


def mixed_precision(device: torch.device, dtype: torch.dtype | None) -> AbstractContextManager:
    """Mixed precision of a model call: ``torch.autocast(device.type, dtype)`` (matmuls in bfloat16, the
    parameters stay float32), or nothing for ``dtype=None``.

    Why autocast over float32 master weights rather than bfloat16 weights with an fp32 copy: an AdamW step
    changes a weight by about ``lr`` (≈1e-4 … 1e-3), below bfloat16's resolution (2⁻⁸ ≈ 4e-3 relative) for any
    weight above ~0.1, so bfloat16-stored weights would drop most updates; float32 parameters are the master
    weights the optimizer updates directly, with no second copy to keep in sync, and checkpoints, resume and
    the reference/critic copies stay float32 unchanged. The price is float32 weight memory (2× bfloat16)."""
    return nullcontext() if dtype is None else torch.autocast(device.type, dtype=dtype)


def _chat(prompt: str | Example) -> list[dict]:
    """The chat messages of a prompt text or an Example."""
    messages = getattr(prompt, "messages", None)
    if messages is not None:
        return [dict(m) for m in messages]
    return [{"role": "user", "content": getattr(prompt, "prompt", prompt)}]


def _tools(prompt: str | Example) -> list[dict] | None:
    """The tool schemas an Example hands its chat template; None for a text or an Example without tools."""
    tools = getattr(prompt, "tools", None)
    return None if tools is None else [dict(t) for t in tools]


@contextmanager
def loading(path: Path) -> Iterator[None]:
    """Turns a garbled config.json, tokenizer or weights file of checkpoint folder ``path`` into a ConfigError."""
    try:
        yield
    except (OSError, ValueError) as err:
        raise ConfigError(f"checkpoint folder {str(path)!r} cannot be loaded: {type(err).__name__}: "
                          f"{' '.join(str(err).split())}") from err


def load_tokenizer(path: str | Path):
    """The tokenizer of the local checkpoint folder ``path`` (never the hub); a FileNotFoundError naming a
    missing folder or one without config.json."""
    path = Path(path)
    if not (path / "config.json").is_file():
        what = "does not exist" if not path.exists() else "has no config.json"
        raise FileNotFoundError(f"checkpoint folder {str(path)!r} {what}: expected a save_pretrained folder")
    with loading(path):
        return AutoTokenizer.from_pretrained(path, local_files_only=True)


class Policy(nn.Module):
    """A causal LM with its tokenizer: prompt/completion encoding, decoding and response log-probs.

    ``model`` may be LoRA-wrapped (peft); ``hf_model`` is always the underlying ``PreTrainedModel``.
    ``stop_token_ids`` are the ids that end a response: the tokenizer's eos and the generation config's.
    ``compute_dtype``: the model calls run under ``mixed_precision`` in it (bfloat16), None: float32.

    Devices: the model lives on ``device``; the token tensors it is given may live elsewhere (the rollout batch
    stays on the host, where the core's math and the rewards run): each call moves its inputs to ``device``
    and returns float32 results on the inputs' device.

    Policy kinds (``model.kind``, polo.policy.kinds) subclass it. What a kind may change: ``input_names`` (the
    per-prompt model inputs besides the token ids, e.g. an image's ``pixel_values``, produced by
    ``prompt_inputs``, carried in the rollout batch's extras and handed back to every forward by
    ``model_inputs``), ``own_sampler`` (a policy that decodes itself, e.g. a diffusion LM; None: polo's KV-cache
    sampler) and ``demonstration_loss`` (the warm start's supervised loss).
    """

    input_names: ClassVar[tuple[str, ...]] = ()
    """Names of the per-prompt model inputs besides the token ids (``prompt_inputs``); none for a text LM."""
    own_sampler: ClassVar[Callable[..., Any] | None] = None
    """A decoding function with ``polo.engines.sampler.sample``'s signature that replaces polo's sampler; None."""
    auto_model: ClassVar[type] = AutoModelForCausalLM
    """The Hugging Face auto class ``load`` reads a checkpoint folder of this kind with."""
    causal_trunk: ClassVar[bool] = True
    """Whether ``hf_model.base_model`` is a causal text trunk a critic can copy (``ValueModel.from_policy``)."""
    pack_rows: PackRows = "auto"
    """The log-prob forward's packed rows (``read_after_prompt``'s ``pack``; the trainer sets ``train.pack_rows``)."""
    compile_decode: bool = False
    """Run the sampler's one-token decode steps through ``torch.compile`` (``decode_step_model``; the trainer sets
    ``rollout.compile_decode``)."""

    def __init__(self, model: PreTrainedModel, tokenizer, *, chat_template: bool = False,
                 compute_dtype: torch.dtype | None = None):
        super().__init__()
        self.model = model
        self.tokenizer = tokenizer
        self.chat_template = chat_template and getattr(tokenizer, "chat_template", None) is not None
        self.compute_dtype = compute_dtype
        generation_eos = getattr(self.hf_model.generation_config, "eos_token_id", None)
        generation_eos = generation_eos if isinstance(generation_eos, list) else [generation_eos]
        self.eos_token_id = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else generation_eos[0]
        if self.eos_token_id is None:
            raise ValueError("the tokenizer and the generation config define no eos token")
        self.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_token_id
        self.stop_token_ids = sorted({self.eos_token_id, *(i for i in generation_eos if i is not None)})

    @classmethod
    def load(cls, path: str | Path, *, dtype=torch.float32, device="cpu", lora: LoraConfig | None = None,
             chat_template: bool = False, compute_dtype: torch.dtype | None = None) -> "Policy":
        """Load a local checkpoint folder (never the hub); a saved ``adapter/`` is loaded trainable,
        otherwise ``lora`` (if ``r > 0``) adds fresh adapters. ``dtype``: the stored parameters' (keep float32
        to train: they are the optimizer's master weights); ``compute_dtype``: see ``mixed_precision``."""
        path = Path(path)
        tokenizer = load_tokenizer(path)
        with loading(path):
            model = cls.auto_model.from_pretrained(path, dtype=dtype, local_files_only=True)
        if (path / ADAPTER_DIR).is_dir():
            model = load_lora(model, path / ADAPTER_DIR)
        elif lora is not None:
            model = apply_lora(model, lora)
        return cls(model.to(device), tokenizer, chat_template=chat_template, compute_dtype=compute_dtype)

    def save(self, path: str | Path, *, merge_lora: bool = False) -> None:
        """``save_pretrained`` of model and tokenizer. With LoRA the folder holds the base weights
        (unmerged) and the adapter in ``adapter/``; ``Policy.load`` restores both. ``merge_lora``: the merged
        weights instead (a plain model, no adapter); the policy itself is left unchanged."""
        path = Path(path)
        if is_lora(self.model) and merge_lora:
            self.hf_model.save_pretrained(path, state_dict=whole_state(merged_state_dict(self.model)))
        elif is_lora(self.model):
            self.hf_model.save_pretrained(path, state_dict=whole_state(base_state_dict(self.model)))
            self.save_adapter(path / ADAPTER_DIR)
        elif self.sharded:
            self.model.save_pretrained(path, state_dict=whole_state(self.model.state_dict()))
        else:
            self.model.save_pretrained(path)
        self.tokenizer.save_pretrained(path)

    def save_adapter(self, path: str | Path) -> None:
        """The LoRA adapter alone (peft's ``save_pretrained``), gathered whole first when it is sharded."""
        self.model.save_pretrained(path, **({"state_dict": whole_state(self.model.state_dict())} if self.sharded
                                            else {}))

    @property
    def sharded(self) -> bool:
        """Whether the weights are shards (``dist.shard: fsdp``): reading them whole is then a collective that every
        rank must make at the same time (``whole_state``)."""
        return any(isinstance(m, FSDPModule) for m in self.modules())  # parameters alone: whole while gathered

    @classmethod
    def build_tiny(cls, model_settings) -> "Policy":
        """A fresh, untrained built-in model sized by ``model_settings.tiny`` (the recipe's ``model`` section;
        seed with ``torch.manual_seed``)."""
        return build_tiny_policy(model_settings.tiny)

    def prompt_inputs(self, prompts: Sequence[str | Example]) -> dict[str, Tensor]:
        """The per-prompt model inputs of ``prompts`` besides their token ids (``input_names``), each with one
        row per prompt, on the host; none for a text LM."""
        return {}

    def model_inputs(self, batch) -> dict[str, Tensor]:
        """The ``input_names`` inputs of a rollout batch's rows (its extras), to pass to ``forward_logp``."""
        return {name: batch.extras[name] for name in self.input_names}

    def demonstration_loss(self, prompt_ids: Tensor, prompt_mask: Tensor, ids: Tensor, mask: Tensor,
                           inputs: dict[str, Tensor]) -> Tensor:
        """The warm start's supervised loss on demonstrations ``ids``: ``−mean_{completion tokens} log π(y_t | x,
        y_<t)``."""
        logp = self.forward_logp(prompt_ids, prompt_mask, ids, mask, **inputs)["logp"]
        return -(logp * mask).sum() / mask.sum()

    @property
    def hf_model(self) -> PreTrainedModel:
        return self.model.get_base_model() if is_lora(self.model) else self.model

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def autocast(self) -> AbstractContextManager:
        """The mixed precision of this policy's model calls (``mixed_precision``)."""
        return mixed_precision(self.device, self.compute_dtype)

    def enable_gradient_checkpointing(self) -> None:
        """Recompute each layer's activations in the backward instead of keeping them (memory for compute), in
        training mode only: sampling and no-grad forwards run in eval mode and keep their KV cache. The
        training forward is then one plain or packed forward (``read_after_prompt``: the layers drop a KV cache)."""
        self.hf_model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})

    def encode_prompts(self, prompts: Sequence[str | Example]) -> tuple[Tensor, Tensor]:
        """Left-padded host ``(ids, mask)`` ``[B, Tp]`` of prompt texts or Examples: the prompt text with the
        tokenizer's own special tokens (the char tokenizer and Llama prepend bos), or with the chat template
        an Example's ``messages`` (a text, or an Example without messages: one user turn) and ``tools`` + the
        generation prompt."""
        if self.chat_template:
            texts = [self.tokenizer.apply_chat_template(_chat(p), tools=_tools(p), tokenize=False,
                                                        add_generation_prompt=True) for p in prompts]
            seqs = self.tokenizer(texts, add_special_tokens=False)["input_ids"]
        else:
            seqs = self.tokenizer([getattr(p, "prompt", p) for p in prompts])["input_ids"]
        return pad_sequences(seqs, self.pad_token_id, left=True)

    def encode_completions(self, completions: list[str]) -> tuple[Tensor, Tensor]:
        """Right-padded host ``(ids, mask)`` ``[B, T]`` of each completion followed by eos."""
        seqs = self.tokenizer(list(completions), add_special_tokens=False)["input_ids"]
        return pad_sequences([s + [self.eos_token_id] for s in seqs], self.pad_token_id, left=False)

    def decode(self, response_ids: Tensor, response_mask: Tensor) -> list[str]:
        """Text of the masked response tokens, without eos, pad and other special tokens."""
        keep = response_mask.bool() & ~torch.isin(response_ids, torch.tensor(self.stop_token_ids).to(response_ids))
        seqs = [[i for i in row if i >= 0] for row in torch.where(keep, response_ids, -1).tolist()]
        backend = getattr(self.tokenizer, "backend_tokenizer", None)
        if backend is None or getattr(self.tokenizer, "clean_up_tokenization_spaces", False):
            return self.tokenizer.batch_decode(seqs, skip_special_tokens=True)
        return backend.decode_batch(seqs, skip_special_tokens=True)  # one Rust call, not one Python call per row

    def decoder(self) -> CachedDecoder:
        """Incremental KV-cached decoding for the sampler (a wrapper may restrict the logits it returns)."""
        return CachedDecoder(self.model, self.hf_model, self.autocast, step_model=self.decode_step_model())

    def decode_step_model(self) -> nn.Module:
        """The module the sampler's one-token steps call: the model, or with ``compile_decode`` the model through
        ``torch.compile(dynamic=True, mode="max-autotune-no-cudagraphs")``, built on first use and kept (outside
        the module tree: its parameters are the model's). Shapes are dynamic (the batch shrinks as rows finish,
        the cache grows), so one compilation serves every step and call; the prefill runs uncompiled. Measured
        in docs/performance.md ("Speed to the machine's limit (issue #33)"): the compilation costs tens of
        seconds once per process and pays back only over long decodes."""
        if not self.compile_decode:
            return self.model
        if "compiled_decode" not in self.__dict__:
            self.__dict__["compiled_decode"] = torch.compile(self.model, dynamic=True,
                                                             mode="max-autotune-no-cudagraphs")
        return self.__dict__["compiled_decode"]

    def restrict(self, logits: Tensor, prompt_ids: Tensor, prompt_mask: Tensor, response_ids: Tensor) -> Tensor:
        """The response positions' logits ``[B, T, V]`` as the policy's distribution sees them: unchanged here;
        a wrapper that restricts the action space (``ActionMaskedPolicy``) sets excluded tokens to −inf."""
        return logits

    def response_logits(self, prompt_ids: Tensor, prompt_mask: Tensor, response_ids: Tensor,
                        hidden_layer: int | None, inputs: dict[str, Tensor],
                        reads: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
        """``(logits [B, T, V] float32 predicting each response token, hidden_states[hidden_layer] or None)`` of one
        forward over ``prompt ++ response`` (position t−1 predicts response token t); called inside ``autocast``
        with the tensors on ``device``; ``inputs``: the rows' ``model_inputs`` (none for a text LM). ``reads``
        ``[B]``: row b's logits are used up to position ``reads[b]`` (``reads_of`` the response mask; the rest may
        be 0), which lets ``pack_rows`` leave the padding out; None: all are used."""
        T = response_ids.shape[1]
        if hidden_layer is None:
            return read_after_prompt(self.model, prompt_ids, prompt_mask, response_ids[:, :-1],
                                     lambda out: out.logits, lm_head=True, reads=reads,
                                     pack=self.pack_rows).float(), None
        out = self.model(**concat_inputs(prompt_ids, prompt_mask, response_ids), use_cache=False,
                         logits_to_keep=T + 1, output_hidden_states=True)
        return out.logits[:, :-1].float(), out.hidden_states[hidden_layer]

    def response_head(self) -> nn.Linear | None:
        """The bias-free lm_head that ``forward_logp`` applies to the response tokens alone (polo.policy.head), or
        None where the logits need the model's own forward: an architecture outside ``PLAIN_HEAD_MODELS``, a head
        with a bias or an adapter, a policy that restricts or computes its logits its own way (a subclass's
        ``restrict`` or ``response_logits``), sharded weights (FSDP unshards the head in the root's forward)."""
        head = self.hf_model.get_output_embeddings()
        plain = (type(self).restrict is Policy.restrict and type(self).response_logits is Policy.response_logits
                 and self.hf_model.config.model_type in PLAIN_HEAD_MODELS and type(head) is nn.Linear
                 and head.bias is None and not self.sharded)
        return head if plain else None

    def forward_logp(self, prompt_ids: Tensor, prompt_mask: Tensor, response_ids: Tensor, response_mask: Tensor,
                     *, temperature: float = 1.0, return_entropy: bool | Literal["metric"] = False, return_full: bool = False,
                     hidden_layer: int | None = None, **inputs: Tensor) -> dict[str, Tensor]:
        """One forward over ``prompt ++ response``: ``logp`` ``[B, T]`` of the response tokens under
        ``softmax(restrict(logits) / temperature)`` (0 where masked); optionally ``entropy`` ``[B, T]`` of that
        distribution (``return_entropy="metric"``: detached), ``logprobs_full`` ``[B, T, V]`` (the whole
        log-softmax) and ``hidden_states`` ``[B, Tp + T, d]`` (the model's ``hidden_states[hidden_layer]``, 0 =
        embeddings); all float32, on the inputs' device. ``inputs``: the rows' ``model_inputs``.

        Without ``return_full`` and ``hidden_layer``, a ``response_head`` runs on the trunk's states at the
        response tokens only (``response_head_logp``: no logits at prompt or padding positions, no ``[B, T, V]``
        tensor); otherwise the model's own forward gives ``[B, T, V]`` logits."""
        home = response_ids.device
        prompt_ids, prompt_mask, response_ids, response_mask = (
            x.to(self.device) for x in (prompt_ids, prompt_mask, response_ids, response_mask))
        inputs = {name: x.to(self.device) for name, x in inputs.items()}
        head = None if return_full or hidden_layer is not None or inputs else self.response_head()
        if head is not None:
            result = self._head_logp(head, prompt_ids, prompt_mask, response_ids, response_mask, temperature,
                                     return_entropy)
            return {name: value.to(home) for name, value in result.items()}
        with self.autocast():  # the model (and a restricting wrapper's masking model) in compute_dtype
            logits, hidden = self.response_logits(prompt_ids, prompt_mask, response_ids, hidden_layer, inputs,
                                                  reads_of(response_mask))
            if temperature != 1.0:
                logits = logits / temperature
            logits = self.restrict(logits, prompt_ids, prompt_mask, response_ids)
        masked = ~response_mask.bool()
        result = {"logp": token_logp(logits, response_ids).masked_fill(masked, 0.0)}
        if return_entropy:  # "metric": no autograd history (no [B, T, V] tensors kept for a backward)
            source = logits.detach() if return_entropy == "metric" else logits
            result["entropy"] = entropy_from_logits(source).masked_fill(masked, 0.0)
        if return_full:
            result["logprobs_full"] = logits.log_softmax(-1).masked_fill(masked[..., None], 0.0)
        if hidden is not None:
            result["hidden_states"] = hidden.float()
        return {name: value.to(home) for name, value in result.items()}

    def _head_logp(self, head: nn.Linear, prompt_ids: Tensor, prompt_mask: Tensor, response_ids: Tensor,
                   response_mask: Tensor, temperature: float,
                   return_entropy: bool | Literal["metric"]) -> dict[str, Tensor]:
        """``forward_logp``'s ``logp`` (and ``entropy``) from the trunk's last states at the N masked-in response
        tokens, ``[N, d]``, and ``response_head_logp``; scattered into ``[B, T]`` (0 where masked)."""
        with self.autocast():
            hidden = read_after_prompt(self.hf_model.base_model, prompt_ids, prompt_mask, response_ids[:, :-1],
                                       lambda out: out.last_hidden_state, lm_head=False,
                                       reads=reads_of(response_mask), pack=self.pack_rows)
            at = response_mask.bool().nonzero(as_tuple=True)
            logp, entropy = response_head_logp(hidden[at], head.weight, response_ids[at], temperature=temperature,
                                               with_entropy=bool(return_entropy))

        def scatter(values: Tensor) -> Tensor:
            return values.new_zeros(response_ids.shape, dtype=torch.float32).index_put(at, values.float())

        result = {"logp": scatter(logp)}
        if return_entropy:
            result["entropy"] = scatter(entropy.detach() if return_entropy == "metric" else entropy)
        return result

    forward = forward_logp


class ValueModel(nn.Module):
    """PPO critic: its own copy of the policy's transformer trunk and a zero-initialised linear head."""

    pack_rows: PackRows = "auto"
    """The trunk forward's packed rows (``read_after_prompt``'s ``pack``; copied from the policy)."""

    def __init__(self, trunk: nn.Module, hidden_size: int, compute_dtype: torch.dtype | None = None):
        super().__init__()
        self.trunk = trunk
        self.head = nn.Linear(hidden_size, 1, dtype=next(trunk.parameters()).dtype)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)
        self.compute_dtype = compute_dtype

    @classmethod
    def from_policy(cls, policy: Policy) -> "ValueModel":
        """A copy of the policy's trunk (with its device, mixed precision, gradient checkpointing and
        ``pack_rows``)."""
        if not policy.causal_trunk:
            raise ConfigError(f"a critic copies a causal LM's trunk, but the policy is a {type(policy).__name__}: "
                              f"use an advantage without a value model (group baselines) for this model.kind")
        trunk = copy.deepcopy(policy.hf_model.base_model)
        trunk.requires_grad_(True)
        critic = cls(trunk, policy.hf_model.config.hidden_size, policy.compute_dtype).to(policy.device)
        critic.pack_rows = policy.pack_rows
        return critic

    def forward(self, prompt_ids: Tensor, prompt_mask: Tensor, response_ids: Tensor, response_mask: Tensor) -> Tensor:
        """``[B, T]`` float32 values ``V(s_t)`` read at the position just before response token ``t`` (0 where
        masked), on the inputs' device; the trunk runs in ``compute_dtype``, the head in float32."""
        home, device = response_ids.device, self.head.weight.device
        prompt_ids, prompt_mask, response_ids = (x.to(device) for x in (prompt_ids, prompt_mask, response_ids))
        with mixed_precision(device, self.compute_dtype):
            hidden = read_after_prompt(self.trunk, prompt_ids, prompt_mask, response_ids[:, :-1],
                                       lambda out: out.last_hidden_state, lm_head=False,
                                       reads=reads_of(response_mask.to(device)), pack=self.pack_rows)
        values = self.head(hidden.to(self.head.weight.dtype)).squeeze(-1).float().to(home)
        return values.masked_fill(~response_mask.bool(), 0.0)


def build_tiny_policy(cfg: TinyModelConfig | None = None) -> Policy:
    """The default policy: the char tokenizer and a fresh tiny model (seed with ``torch.manual_seed``)."""
    tokenizer = build_char_tokenizer()
    return Policy(build_tiny_model(cfg or TinyModelConfig(), tokenizer), tokenizer)
