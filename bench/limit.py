"""The machine's limit: matmul throughput at a step's own GEMM shapes, and the model FLOPs the step does.

FLOPs of one call of a causal LM on ``rows`` × ``q`` new positions after ``past`` cached ones, with logits at
``k`` positions per row (``call_flops``; h hidden, V vocabulary, L layers, N the linears' parameters,
``L · (q, k, v, o, gate, up, down)``, embeddings and norms left out):

    F = 2·N·rows·q  +  2·h·V·rows·k  +  4·L·a·rows·Σ_{j=1..q} (past + j)

The last term is QK^T and AV (a = heads · head_dim, = h for these models), each query against the keys up to
itself (the causal half of a row's dense product, padding and packed neighbours included). A decode step is
the call with ``q = 1`` at context ``past + 1``. A call made with autograd on is an update's forward; its
backward counts ``2 · F`` (a grad-input and a grad-weight GEMM per forward GEMM). ``FlopCounter`` adds up every
call of a model as the benchmark runs it, so the count is of what the step computed: prompt sharing's prefill of
distinct prompts and continuations, packed rows, the sampler's shrinking batch, log-prob forwards.

The limit (``rates``): each GEMM of those calls timed alone with ``torch`` at the row count M it ran at
(forward ``x[M, in] @ W[out, in]ᵀ``; backward ``g[M, out] @ W`` and ``gᵀ @ x``; decode: the forward GEMMs of
one-token calls, M = rows), M rounded to a half power of 2; a class's throughput is its FLOPs over the seconds
its GEMMs take at those rates, ``R_c = Σ F / Σ (F / r_M)``. The fraction of the limit of work done in ``t``
seconds is ``(Σ_c F_c / R_c) / t``: the time the machine's matmuls need for the step's FLOPs, over the time
taken (attention FLOPs are charged at their call's class rate).

    python bench/limit.py [--size tiny|small|base] [--tokens N] [--rows N] [--threads N]
"""
from __future__ import annotations

import argparse
import math
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field, replace

import torch

KINDS = ("forward", "backward", "decode")
PHASES = ("no-grad", "grad")
"""A call's phase: autograd off (the sampler's prefill and decode, log-prob forwards) or on (the update)."""
MIN_REP_S = 0.005
"""Each timed repetition runs a GEMM enough times to take at least this long."""


@dataclass(frozen=True)
class ModelShape:
    """What the FLOP count needs of a Llama-style causal LM's config."""

    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int

    @classmethod
    def of(cls, config) -> ModelShape:
        heads = config.num_attention_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        return cls(config.hidden_size, config.intermediate_size, config.num_hidden_layers, heads,
                   getattr(config, "num_key_value_heads", None) or heads, head_dim, config.vocab_size)

    @property
    def linears(self) -> list[tuple[int, int]]:
        """``(in, out)`` of one layer's q, k, v, o, gate, up and down projections."""
        h, attn, kv, mlp = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim, self.intermediate
        return [(h, attn), (h, kv), (h, kv), (attn, h), (h, mlp), (h, mlp), (mlp, h)]

    @property
    def params(self) -> int:
        """Non-embedding parameters of the linears, N."""
        return self.layers * sum(n_in * n_out for n_in, n_out in self.linears)


def call_flops(shape: ModelShape, rows: int, q: int, past: int = 0, logits: int | None = None) -> float:
    """Forward FLOPs of one call (module docstring): ``2·N·rows·q + 2·h·V·rows·logits``
    ``+ 4·L·a·rows·Σ_j (past + j)``; ``logits`` None: at every position."""
    logits = q if logits is None else logits
    keys = q * past + q * (q + 1) // 2
    return 2.0 * rows * (shape.params * q + shape.hidden * shape.vocab * logits
                         + 2 * shape.layers * shape.heads * shape.head_dim * keys)


def bucket(m: int) -> int:
    """``m`` rounded to the nearest half power of 2 (the GEMM row counts timed)."""
    return max(1, round(2 ** (round(2 * math.log2(m)) / 2)))


@dataclass
class Work:
    """FLOPs by (phase, kind), and the GEMMs behind them: FLOPs by (kind, in, out, bucketed M)."""

    flops: Counter = field(default_factory=Counter)
    gemms: Counter = field(default_factory=Counter)

    def __add__(self, other: Work) -> Work:
        return Work(self.flops + other.flops, self.gemms + other.gemms)

    def add_call(self, shape: ModelShape, rows: int, q: int, past: int, logits: int, grad: bool) -> None:
        """One model call (``call_flops``' arguments): its forward, and with ``grad`` its backward (2×)."""
        kinds = ("forward", "backward") if grad else ("decode",) if q == 1 else ("forward",)
        forward = call_flops(shape, rows, q, past, logits)
        gemms = [(n_in, n_out, rows * q, shape.layers) for n_in, n_out in shape.linears]
        gemms.append((shape.hidden, shape.vocab, rows * logits, 1))
        for kind in kinds:
            scale = 2 if kind == "backward" else 1
            self.flops[PHASES[grad], kind] += scale * forward
            for n_in, n_out, m, count in gemms:
                if m:
                    self.gemms[kind, n_in, n_out, bucket(m)] += scale * 2.0 * m * n_in * n_out * count

    @staticmethod
    def of(works) -> Work:
        """The sum of ``works``."""
        return sum(works, Work())

    def total(self) -> float:
        return sum(self.flops.values())


class FlopCounter:
    """Counts the FLOPs of every call of ``model`` (a Hugging Face causal LM) while entered; ``take()`` returns
    the Work since the last take.

    The count is taken at the model's trunk (``model.base_model``), which every forward runs: called through the
    causal LM it has that call's ``logits_to_keep``; called alone (polo's training forward, whose head runs on
    the response tokens only: polo.policy.head) it has none, and each ``response_head_logp`` call adds its own
    N rows of head work (forward 2·h·V·N, and 2× that in the backward when autograd is on)."""

    def __init__(self, model):
        self.model, self.shape, self.work, self.handles = model, ModelShape.of(model.config), Work(), []
        self.keep = None

    def __enter__(self) -> FlopCounter:
        import polo.policy.policy as policy_module

        self.handles = [self.model.register_forward_pre_hook(self._causal_lm, with_kwargs=True),
                        self.model.base_model.register_forward_pre_hook(self._trunk, with_kwargs=True)]
        self.head, policy_module.response_head_logp = policy_module.response_head_logp, self._head
        return self

    def __exit__(self, *exc) -> None:
        import polo.policy.policy as policy_module

        for handle in self.handles:
            handle.remove()
        policy_module.response_head_logp = self.head

    def _causal_lm(self, module, args, kwargs) -> None:
        self.keep = kwargs.get("logits_to_keep", 0)  # read by the trunk call this one makes next

    def _trunk(self, module, args, kwargs) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        ids = kwargs["inputs_embeds"] if ids is None else ids
        rows, q = ids.shape[:2]
        cache = kwargs.get("past_key_values", kwargs.get("cache"))
        past = cache.get_seq_length() if cache is not None else 0
        keep, self.keep = self.keep, None
        logits = 0 if keep is None else len(keep) if isinstance(keep, torch.Tensor) else min(keep, q) if keep else q
        self.work.add_call(self.shape, rows, q, past, logits, torch.is_grad_enabled())

    def _head(self, hidden, weight, targets, **kwargs):
        self.work.add_call(self.shape, len(hidden), 0, 0, 1, torch.is_grad_enabled())  # N rows of head alone
        return self.head(hidden, weight, targets, **kwargs)

    def take(self) -> Work:
        work, self.work = self.work, Work()
        return work

    def counted(self, fn):
        """``fn`` returning ``(fn(), the Work of that call)``."""
        def run():
            out = fn()
            return out, self.take()
        return run


_SECONDS: dict[tuple, float] = {}
"""Seconds of the GEMMs of one linear by (backward, m, in, out, threads), measured once per process."""


def measure(keys: set[tuple[bool, int, int, int]], threads: int, reps: int = 7) -> None:
    """Time the GEMMs of each ``(backward, m, in, out)`` not yet measured on ``threads`` threads (forward / decode:
    ``x @ Wᵀ``; backward: ``g @ W`` and ``gᵀ @ x``): a warm-up call, then ``reps`` rounds over all of them in turn
    (a burst of load on the shared machine then hits one round of many shapes, not all of one), each repetition
    long enough (``MIN_REP_S``); the median per shape."""
    todo = [key for key in sorted(keys) if (*key, threads) not in _SECONDS]
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        calls = [(_gemms(*key), 1) for key in todo]
        calls = [(fn, max(1, math.ceil(MIN_REP_S / max(_seconds(fn, 1), 1e-7)))) for fn, _ in calls]  # warm-up
        times = [[] for _ in todo]
        for _ in range(reps):
            for (fn, n), got in zip(calls, times):
                got.append(_seconds(fn, n) / n)
    finally:
        torch.set_num_threads(before)
    _SECONDS.update({(*key, threads): statistics.median(got) for key, got in zip(todo, times)})


def _gemms(backward: bool, m: int, n_in: int, n_out: int):
    x, w, g = torch.randn(m, n_in), torch.randn(n_out, n_in), torch.randn(m, n_out)
    if backward:
        return lambda: (torch.mm(g, w), torch.mm(g.t(), x))
    return lambda: torch.nn.functional.linear(x, w)


def _seconds(fn, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return time.perf_counter() - start


def rates(work: Work, threads: int | None = None) -> dict[str, float]:
    """FLOP/s of each kind's GEMMs at ``work``'s shapes, ``R_c = Σ F / Σ (F / r_M)`` (``threads`` None: torch's
    current count)."""
    threads = threads or torch.get_num_threads()
    measure({(kind == "backward", m, n_in, n_out) for kind, n_in, n_out, m in work.gemms}, threads)
    spent, done = Counter(), Counter()
    for (kind, n_in, n_out, m), flops in work.gemms.items():
        one = 2.0 * m * n_in * n_out * (2 if kind == "backward" else 1)
        spent[kind] += flops / one * _SECONDS[kind == "backward", m, n_in, n_out, threads]
        done[kind] += flops
    return {kind: done[kind] / spent[kind] for kind in KINDS if done[kind]}


def achieved(work: Work, seconds: float, phase: str | None = None) -> tuple[float, float]:
    """``(model GFLOP/s, fraction of the limit)`` of ``work`` (only ``phase``'s calls, None: all) done in
    ``seconds``: ``F / t`` and ``(Σ_c F_c / R_c) / t`` at the current thread count."""
    rate = rates(work)
    flops = {kind: f for (p, kind), f in work.flops.items() if phase in (None, p)}
    return sum(flops.values()) / seconds / 1e9, sum(f / rate[kind] for kind, f in flops.items()) / seconds


def describe(work: Work, seconds: float | None = None) -> str:
    """The limit at ``work``'s shapes, GFLOP/s per kind at 1 thread and at torch's current thread count; with
    ``seconds``, first the model GFLOP/s achieved."""
    counts = sorted({1, torch.get_num_threads()})
    per = {t: rates(work, t) for t in counts}
    done = f"{work.total() / seconds / 1e9:.2f} model GFLOP/s; " if seconds else ""
    return done + "limit GFLOP/s (" + " / ".join(f"{t} thread" for t in counts) + "): " + ", ".join(
        f"{kind} " + " / ".join(f"{per[t][kind] / 1e9:.1f}" for t in counts) for kind in per[counts[0]])


def step_fractions(seconds: list[float], rows: list[dict], works: list[Work]) -> list[float]:
    """Fractions of the limit of polo ``Trainer.step`` calls (their wall seconds, logged rows and Work): the
    whole step, the sampling stage (no-grad calls over ``time/sample``) and the update (grad calls over
    ``time/update``)."""
    work = Work.of(works)
    return [achieved(work, sum(seconds))[1],
            *(achieved(work, sum(row[f"time/{stage}"] for row in rows), phase)[1]
              for stage, phase in (("sample", "no-grad"), ("update", "grad")))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="tiny", help="a bench/common.py model size (tiny, small, base)")
    parser.add_argument("--tokens", type=int, default=512, help="positions of a forward / backward call")
    parser.add_argument("--rows", type=int, default=64, help="rows of a decode call (one token each)")
    parser.add_argument("--context", type=int, default=32, help="a decode step's context length")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads(), help="the second thread count")
    for name in ("hidden", "intermediate", "layers", "heads", "vocab"):
        parser.add_argument(f"--{name}", type=int, help=f"override the size's {name}")
    args = parser.parse_args()
    from common import build_model

    torch.set_num_threads(args.threads)
    shape = ModelShape.of(build_model(args.size, eos_prob=None)[0].config)
    overrides = {name: getattr(args, name) for name in ("hidden", "intermediate", "layers", "heads", "vocab")}
    shape = replace(shape, **{k: v for k, v in overrides.items() if v is not None})
    if args.hidden or args.heads:
        shape = replace(shape, kv_heads=shape.heads, head_dim=shape.hidden // shape.heads)
    work = Work()
    work.add_call(shape, 1, args.tokens, 0, args.tokens, grad=True)
    work.add_call(shape, args.rows, 1, args.context - 1, 1, grad=False)
    print(f"# {shape}, N = {shape.params:,}; forward/backward at {args.tokens} positions, decode at {args.rows} "
          f"rows, context {args.context}")
    print(describe(work))
    flops = {kind: f for (_, kind), f in work.flops.items()}
    print(", ".join(f"{kind} {f / 1e6:.1f} MFLOP" for kind, f in flops.items()))


if __name__ == "__main__":
    main()
