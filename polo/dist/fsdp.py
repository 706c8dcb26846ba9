"""The sharded learner (``dist.shard: fsdp``): FSDP2 (``torch.distributed.fsdp.fully_shard``) splits every
parameter, its gradient and its optimizer state over the N learner ranks, so each holds about 1/N of them.

How polo uses it (docs/scaling.md):

- what is sharded: every torch module of the run that holds a Hugging Face decoder stack, the policy, the
  trained roles (critics, PRIME's implicit PRM) and the frozen ones (reference, teachers), each decoder layer
  as one unit and then the model's root (embeddings, final norm, lm_head); a critic's value head stays whole
  on every rank (a few thousand parameters), its gradient summed like the data-parallel learner's;
- gradients: polo's loss is normalised by the whole minibatch's counts, so the global gradient is the *sum*
  of the ranks' gradients; the reduce-scatter sums (divide factor 1) instead of FSDP's default mean;
- lockstep: FSDP all-gathers each layer in every forward, so all ranks must run the same forwards in the same
  order. Providers (reference and old log-probs, critic values) run on the same full batch with the same
  micro-batches on every rank; each update micro-batch loop runs as many iterations on every rank (a rank with
  fewer rows runs zero-weight passes on one row, ``Updater``); rollouts and held-out evaluation, where each rank
  decodes its own prompts for its own number of steps, run inside ``ShardedModules.gathered``: every module
  unsharded (its full weights on each rank, in the mixed-precision dtype) and no collective until it ends;
- checkpoints: ``torch.distributed.checkpoint`` (DCP) writes each rank's shards of the weights and the
  optimizer states under their parameter names, so a run resumes at another world size (DCP re-slices on load),
  and ``polo export`` / evaluation read the same files into an unsharded model in one process.
"""
from __future__ import annotations

import math
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_optimizer_state_dict,
                                                     set_optimizer_state_dict)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule, MixedPrecisionPolicy, OffloadPolicy, fully_shard
from torch.distributed.tensor import DTensor
from transformers import PreTrainedModel

from polo.core.registry import ConfigError
from polo.dist.fsdp_settings import FSDPSettings
from polo.policy.policy import Policy

SHARDED_DIR = "sharded"
"""The DCP folder inside a checkpoint (``step_N/sharded``): the sharded modules' weights and optimizer states."""


def called_roots(module: nn.Module) -> list[nn.Module]:
    """The outermost Hugging Face models in ``module`` that polo calls (FSDP gathers a root's own parameters in
    its forward hook, so the root must be the module that is called): a ``Policy``'s ``model`` (the causal LM,
    or its peft wrapper), else each outermost ``PreTrainedModel`` (a critic's trunk)."""
    roots, inside = [], set()
    for m in module.modules():
        if id(m) in inside:
            continue
        root = m.model if isinstance(m, Policy) else m if isinstance(m, PreTrainedModel) else None
        if root is not None:
            roots.append(root)
            inside.update(id(sub) for sub in (*m.modules(), *root.modules()))
    return roots


def decoder_layers(module: nn.Module) -> list[nn.Module]:
    """The decoder layers of the Hugging Face models inside ``module``: submodules whose class is named in some
    ``PreTrainedModel._no_split_modules`` (e.g. ``LlamaDecoderLayer``), outermost first."""
    names = {name for m in module.modules() for name in (getattr(m, "_no_split_modules", None) or ())}
    layers, inside = [], set()
    for m in module.modules():
        if type(m).__name__ in names and id(m) not in inside:
            layers.append(m)
            inside.update(id(sub) for sub in m.modules())
    return layers


def precision_policy(setting: str, device: torch.device) -> MixedPrecisionPolicy:
    """``dist.fsdp.mixed_precision`` → FSDP's policy on ``device``."""
    if setting == "bf16" or (setting == "auto" and device.type == "cuda"):
        return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    return MixedPrecisionPolicy()


class ShardedModules:
    """The modules of a run sharded over the learner ranks' device mesh (``shard``), with the context that
    gathers them (``gathered``) and their checkpoint I/O. An empty instance (no sharding) does nothing."""

    def __init__(self, settings: FSDPSettings | None = None, world: int = 1, device: torch.device | None = None):
        self.settings = settings or FSDPSettings()
        self.roots: dict[str, nn.Module] = {}
        self.mesh = None
        self.device = device or torch.device("cpu")
        if settings is not None:
            if self.settings.cpu_offload and self.device.type != "cuda":
                raise ConfigError("dist.fsdp.cpu_offload=true moves shards between the CPU and a GPU, but the "
                                  f"policy is on {self.device}: set it false (the shards already live on the CPU)")
            self.mesh = init_device_mesh(self.device.type, (world,))
        self._gathered = False

    def __bool__(self) -> bool:
        return bool(self.roots)

    def shard(self, name: str, module: nn.Module) -> None:
        """Shard ``module``'s Hugging Face models (``called_roots``) in place: each decoder layer, then the rest
        of the model at its root, gradients reduced as sums. Parameters outside them (a critic's value head) stay
        whole on every rank, their gradients summed by the data-parallel all-reduce. ``name`` names the module in
        errors and checkpoints."""
        roots = called_roots(module)
        layers = [decoder_layers(root) for root in roots]
        if not roots or not all(layers):
            raise ConfigError(f"dist.shard=fsdp shards Hugging Face decoder layers, but {name} "
                              f"({type(module).__name__}) holds none: use dist.shard=replicate")
        options = {"mesh": self.mesh, "mp_policy": precision_policy(self.settings.mixed_precision, self.device),
                   "offload_policy": CPUOffloadPolicy() if self.settings.cpu_offload else OffloadPolicy(),
                   "reshard_after_forward": self.settings.reshard_after_forward}
        for root, its_layers in zip(roots, layers):
            for layer in its_layers:
                fully_shard(layer, **options)
            fully_shard(root, **options)
        for m in fsdp_modules(module):
            m.set_gradient_divide_factor(1.0)  # the ranks' gradients are parts of one sum
            m.set_force_sum_reduction_for_comms(True)  # a plain SUM (gloo has no pre-multiplied sum)
        self.roots[name] = module

    @contextmanager
    def gathered(self) -> Iterator[None]:
        """Every sharded module unsharded for the block: each rank may run any forwards (decoding its own
        prompts) with no collective; resharded (and FSDP's reshard-after-forward restored) at the end. Every
        rank enters and leaves together. Nested use is the outer one's."""
        if not self.roots or self._gathered:
            yield
            return
        units = [m for root in self.roots.values() for m in fsdp_modules(root)]
        for m in units:
            m.set_reshard_after_forward(False, recurse=False)
            m.unshard()
        self._gathered = True
        try:
            yield
        finally:
            self._gathered = False
            for m in units:
                m.reshard()
                m.set_reshard_after_forward(self.settings.reshard_after_forward, recurse=False)

    def holds(self, module: nn.Module) -> bool:
        """Whether ``module`` is one of the sharded modules."""
        return any(module is root for root in self.roots.values())

    # -------------------------------------------------------------- checkpoints
    @staticmethod
    def state(modules: dict[str, nn.Module], optimizers: dict[str, torch.optim.Optimizer]) -> dict[str, Any]:
        """The DCP state of ``modules`` (name → a sharded module): each one's weights under ``NAME`` and, for a
        trained one, its optimizer's state under ``NAME.optimizer`` (keyed by parameter names, so it re-slices
        to another world size)."""
        out: dict[str, Any] = {}
        for name, module in modules.items():
            out[name] = module.state_dict()
            if name in optimizers:
                out[f"{name}.optimizer"] = get_optimizer_state_dict(module, optimizers[name])
        return out

    def save(self, folder: Path, modules: dict[str, nn.Module], optimizers: dict[str, torch.optim.Optimizer]) -> None:
        """Every rank writes its shards of ``modules`` and their ``optimizers`` into ``folder/sharded``
        (collective)."""
        dcp.save(self.state(modules, optimizers), checkpoint_id=str(Path(folder) / SHARDED_DIR))

    def load(self, folder: Path, modules: dict[str, nn.Module], optimizers: dict[str, torch.optim.Optimizer]) -> None:
        """Read ``folder/sharded`` into ``modules`` and ``optimizers`` in place, at this run's world size
        (collective); DCP slices each saved tensor anew."""
        state = self.state(modules, optimizers)
        dcp.load(state, checkpoint_id=str(Path(folder) / SHARDED_DIR))
        for name, module in modules.items():
            module.load_state_dict(state[name])
            if name in optimizers:
                set_optimizer_state_dict(module, optimizers[name], state[f"{name}.optimizer"],
                                         options=StateDictOptions(strict=True))


def fsdp_modules(module: nn.Module) -> list[FSDPModule]:
    """The FSDP units inside ``module`` (its layers and its root), in module order."""
    return [m for m in module.modules() if isinstance(m, FSDPModule)]


def is_shard(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` is a shard of a sharded parameter (its gradient is reduced by FSDP)."""
    return isinstance(tensor, DTensor)


def clip_grad_norm(params: list[torch.nn.Parameter], max_norm: float) -> float:
    """``torch.nn.utils.clip_grad_norm_`` over parameters of which some are shards (DTensor): the 2-norm of the
    whole gradient ``sqrt(Σ‖g_sharded‖² + Σ‖g_whole‖²)`` (the same on every rank: a collective), and every
    gradient scaled by ``min(1, max_norm / (norm + 1e-6))`` when the norm is finite. Without shards it is
    ``clip_grad_norm_`` itself."""
    grads = [p.grad for p in params if p.grad is not None]
    shards = [g for g in grads if is_shard(g)]
    if not shards:
        return float(torch.nn.utils.clip_grad_norm_(params, max_norm))
    whole = [g for g in grads if not is_shard(g)]
    squares = float(torch.nn.utils.get_total_norm(shards).full_tensor()) ** 2
    if whole:
        squares += float(torch.nn.utils.get_total_norm(whole)) ** 2
    norm = squares ** 0.5
    if math.isfinite(norm) and norm + 1e-6 > max_norm:
        for g in grads:
            g.mul_(max_norm / (norm + 1e-6))
    return norm


def load_unsharded(folder: Path, name: str, module: nn.Module) -> None:
    """Module ``name``'s weights from checkpoint ``folder``'s DCP files into an unsharded ``module``, in this one
    process (no process group): ``polo export`` and evaluation of a sharded run."""
    state = {name: module.state_dict()}
    with warnings.catch_warnings():  # DCP warns that it reads in one process, as asked
        warnings.simplefilter("ignore", UserWarning)
        dcp.load(state, checkpoint_id=str(Path(folder) / SHARDED_DIR), no_dist=True)
    module.load_state_dict(state[name])


def is_sharded_checkpoint(folder: Path) -> bool:
    return (Path(folder) / SHARDED_DIR).is_dir()


def shard_run(settings: FSDPSettings, world: int, backend: str, policy: Policy, models: dict[str, Any],
              wrappers: list[str]) -> ShardedModules:
    """The run's modules sharded: the policy under ``policy`` and each role model that holds a Hugging Face
    model under its role's name (``wrappers``: the roles that wrap the policy, refused: their wrapper's forward
    is not the model FSDP gathers). One process (no ``torchrun``) shards over a process group of one."""
    if wrappers:
        raise ConfigError(f"dist.shard=fsdp shards the policy's causal LM, but role {wrappers[0]!r} wraps the "
                          f"policy: use dist.shard=replicate with it")
    if type(policy).own_sampler is not None or not policy.causal_trunk:
        raise ConfigError(f"dist.shard=fsdp shards causal LMs; model.kind gives a {type(policy).__name__}: use "
                          f"dist.shard=replicate")
    init_single_process_group(backend)
    sharded = ShardedModules(settings, world, policy.device)
    sharded.shard("policy", policy)
    for name, model in models.items():
        if isinstance(model, nn.Module) and model is not policy and called_roots(model):
            sharded.shard(name, model)
    return sharded


def init_single_process_group(backend: str) -> None:
    """A process group of one where none exists (FSDP needs a mesh even for one rank: a run without
    ``torchrun``). It lives as long as the process, as the one an in-process vLLM engine makes does (vLLM's exit
    handler destroys its groups inside it)."""
    if not dist.is_initialized():
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
