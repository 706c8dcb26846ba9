"""Shared setup for the benchmarks in bench/: models, settings, polo/TRL trainers, timing and tables.

Every benchmark runs on one thread (``torch.set_num_threads(1)``), interleaves the things it compares and
reports medians and ratios measured in the same run: absolute times on a shared machine are noisy, ratios
of interleaved measurements much less so.
"""
from __future__ import annotations

import argparse
import functools
import inspect
import math
import os
import re
import statistics
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

for _var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
    os.environ.setdefault(_var, "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import LlamaForCausalLM  # noqa: E402

from polo.policy.tiny import TinyModelConfig, build_tiny_model  # noqa: E402
from polo.policy.tokenizer import build_char_tokenizer  # noqa: E402

transformers.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()
warnings.filterwarnings("ignore", category=FutureWarning)

SIZES = {
    "tiny": TinyModelConfig(max_position_embeddings=128),  # polo's built-in size: hidden 128, 2 layers
    "small": TinyModelConfig(hidden_size=256, num_layers=4, intermediate_size=1024, max_position_embeddings=128),
    "base": TinyModelConfig(preset="base"),  # the bigger preset: hidden 256, 6 layers, heads of 64, 512 positions
    # a real model's proportions (issue #33): hidden 512, 8 layers, 8 heads of 64, a 32,000-token vocabulary
    # (WIDE_VOCAB): 27.3M parameters in the layers + 16.4M in the tied embedding = 43.7M
    "wide": TinyModelConfig(hidden_size=512, num_layers=8, num_heads=8, intermediate_size=1536,
                            max_position_embeddings=512),
}
WIDE_VOCAB = 32_000
"""The ``wide`` size's vocabulary, that of Llama-2 / Mistral-7B: the lm_head and the softmax over it weigh in a
step as they do in real checkpoints (the character vocabulary's 100 tokens make them negligible)."""
EOS_PROB = 1 / 24
"""EOS probability per token of the varying-length model: lengths are geometric (mean ≈ 22 under a 64 cap)."""
LR = 1e-6
"""AdamW lr of every trainer here. Speed does not depend on it, but the lengths do: at polo's default 5e-4 the
RL signal moves this model's EOS probability within a few steps (mean length 22 → 45 over 3 steps in the
64-token setting, in polo, TRL and the hand-written loop alike, depending on the seed), so the frameworks
would no longer do the same work; at 1e-6 the length distribution stays put."""
CACHE_ARG = "cache" if "cache" in inspect.signature(LlamaForCausalLM.forward).parameters else "past_key_values"


@dataclass(frozen=True)
class Setting:
    """One GRPO step's work: ``prompts`` × ``generations`` completions of at most ``max_tokens`` tokens."""

    name: str
    prompts: int
    generations: int
    max_tokens: int
    minibatches: int = 1
    """Optimizer steps per generation batch (polo ``train.minibatches``, TRL ``steps_per_generation``)."""
    eos_prob: float = EOS_PROB
    """The model's EOS probability per token (``set_eos_prob``): lengths are geometric, capped at max_tokens."""

    @property
    def rows(self) -> int:
        return self.prompts * self.generations


SETTINGS = [Setting("8x8 <=8 tok", 8, 8, 8), Setting("32x8 <=64 tok", 32, 8, 64)]
# the shape of polo/recipes/grpo.yaml
DEFAULT_SETTING = Setting("64x8 <=4 tok, 4 minibatches (polo train grpo)", 64, 8, 4, minibatches=4)
# the long-completion regime (issue #14): P(EOS) = 1/cap, so the mean length is cap·(1 − (1 − 1/cap)^cap) ≈ 0.63 cap
# (81 and 162 tokens) and about 37 % of the completions run to the cap
LONG_SETTINGS = [Setting("4x8 <=128 tok", 4, 8, 128, eos_prob=1 / 128),
                 Setting("4x8 <=256 tok", 4, 8, 256, eos_prob=1 / 256)]
ADDITION = {"name": "addition"}
LONG_TASK = {"name": "addition_trace", "digits": 8}
"""Ladder-like prompts: ``'12345678+87654321='``, 18 characters."""


@dataclass(frozen=True)
class Regime:
    """What a step benchmark runs: the model size, the task giving prompts and rewards, the settings."""

    size: str
    task: dict
    settings: list[Setting]
    skipping: bool = True
    """Also time polo skipping zero-advantage rows. Off in the long regime: there the random model's traced
    completions all score 0, so skipping would drop the whole update; only like-for-like steps are timed."""
    trl: dict = field(default_factory=dict)
    """GRPOConfig fields of TRL's trainer beyond :func:`trl_trainer`'s. The long regime turns TRL's default
    gradient checkpointing off: the same forward/backward work as polo and the floor (the short regime keeps
    TRL's default, as in earlier rounds)."""


REGIMES = {"short": Regime("tiny", ADDITION, SETTINGS),
           "long": Regime("base", LONG_TASK, LONG_SETTINGS, skipping=False, trl={"gradient_checkpointing": False}),
           "wide": Regime("wide", LONG_TASK, LONG_SETTINGS, skipping=False, trl={"gradient_checkpointing": False})}
REGIME_OPTION = {"choices": list(REGIMES), "default": "short",
                 "help": "short: tiny model, addition, <= 64 tokens; long: base model, 8-digit addition_trace prompts, "
                         "<= 128 and <= 256 tokens (issue #14); wide: the same on the 43.7M-parameter model with a 32k "
                         "vocabulary (issue #33)"}


def parse_args(description: str, **extra: dict) -> argparse.Namespace:
    """``--quick`` plus the script's own options (name → argparse kwargs); sets one torch thread."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help="a short run (fewer sizes and repetitions)")
    for name, kwargs in extra.items():
        parser.add_argument(f"--{name}", **kwargs)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"# {Path(sys.argv[0]).name}{' --quick' if args.quick else ''}: torch {torch.__version__}, "
          f"{torch.get_num_threads()} thread", flush=True)
    return args


# --------------------------------------------------------------------------- models
def wide_vocab_tokenizer(size: int = WIDE_VOCAB):
    """polo's char tokenizer with filler tokens ``<f0>``, ``<f1>``, … added up to ``size`` entries: prompts encode
    exactly as with the char tokenizer (its pre-tokenizer splits text into characters, so no filler is ever
    matched), while the model's vocabulary, lm_head and softmax have a BPE vocabulary's width; a sampled filler
    decodes to its text."""
    tokenizer = build_char_tokenizer()
    tokenizer.add_tokens([f"<f{i}>" for i in range(size - len(tokenizer))])
    return tokenizer


def build_model(size: str = "tiny", eos_prob: float | None = EOS_PROB, seed: int = 0):
    """polo's built-in model (``build_tiny_model`` + char tokenizer; ``wide``: ``wide_vocab_tokenizer``) of
    ``size``, in eval mode; with ``eos_prob`` its EOS probability is ``eos_prob`` at every position (0: it never
    stops)."""
    torch.manual_seed(seed)
    tokenizer = wide_vocab_tokenizer() if size == "wide" else build_char_tokenizer()
    model = build_tiny_model(SIZES[size], tokenizer).eval()
    if eos_prob is not None:
        set_eos_prob(model, tokenizer.eos_token_id, eos_prob)
    return model, tokenizer


@torch.no_grad()
def set_eos_prob(model, eos: int, p: float) -> None:
    """Make ``P(eos) ≈ p`` at every position of a random model, so lengths vary like a real policy's.

    Hidden unit 0 becomes a constant bias unit (1 in every token embedding, never written by a layer), so
    the EOS logit is ``h0 · e_eos[0]`` plus noise while every other logit gets the same shift ``h0``;
    ``e_eos[0]`` is then fitted on a batch of random contexts. Shapes and cost are unchanged.
    """
    emb = model.get_input_embeddings().weight
    for layer in model.model.layers:
        layer.self_attn.o_proj.weight[0] = 0.0
        layer.mlp.down_proj.weight[0] = 0.0
    emb[:, 0] = 1.0
    if p == 0:
        emb[eos, 0] = -100.0
        return
    x = torch.randint(4, emb.shape[0], (32, 32), generator=torch.Generator().manual_seed(0))

    def gap(value: float) -> torch.Tensor:  # eos logit − logsumexp of the others, per position
        emb[eos, 0] = value
        logits = model(input_ids=x).logits
        others = torch.cat([logits[..., :eos], logits[..., eos + 1:]], -1)
        return logits[..., eos] - others.logsumexp(-1)

    g1, g2 = gap(1.0), gap(2.0)
    emb[eos, 0] = 1.0 + float(((math.log(p / (1 - p)) - g1) / (g2 - g1)).median())


@functools.cache
def save_model(size: str = "tiny", eos_prob: float | None = EOS_PROB) -> Path:
    """A ``save_pretrained`` folder (model + char tokenizer) of :func:`build_model`, in a temp dir (one per
    size and EOS probability)."""
    model, tokenizer = build_model(size, eos_prob)
    path = Path(tempfile.mkdtemp(prefix=f"polo-bench-{size}-"))
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def random_prompts(batch: int, length: int, vocab: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Unpadded prompts of ``length`` random character tokens (ids ≥ 4: no special tokens) and their mask."""
    ids = torch.randint(4, vocab, (batch, length), generator=torch.Generator().manual_seed(seed))
    return ids, torch.ones_like(ids)


# --------------------------------------------------------------------------- GRPO on a task (default: addition)
def load_task(config: dict = ADDITION):
    from polo.tasks import build_task

    return build_task(dict(config))


def parse_task(spec: str) -> dict:
    """``"NAME,KEY=VALUE,..."`` (values in YAML, as in recipe overrides) → ``{"name": NAME, KEY: VALUE, ...}``."""
    from polo.train.config import parse_overrides

    name, *knobs = spec.split(",")
    return {"name": name, **dict(parse_overrides(knobs))}


def task_overrides(config: dict) -> list[str]:
    """Recipe overrides selecting the task ``config`` (``{"name": ..., **knobs}``)."""
    return [f"task.{key}={value}" for key, value in config.items()]


def prompt_order(n_prompts: int, seed: int = 0, task: dict = ADDITION, pool_size: int | None = None):
    """The first ``n_prompts`` prompts polo's Trainer draws with ``seed`` (same pool, same shuffle); ``pool_size``
    None: the default ``train.train_pool``."""
    from polo.train.config import Loop
    from polo.train.data import PromptStream

    pool = load_task(task).examples("train", pool_size or Loop().train_pool, seed=seed)
    got = PromptStream(pool, seed=seed).next(n_prompts)
    return got[0] if isinstance(got, tuple) else got


def reward_functions(task: dict = ADDITION):
    """The task's default rewards as TRL-signature functions and their weights.

    Each is wrapped to pass on only the dataset column ``answer``: polo's task reward ``correct``
    (``Task.correct_reward``) indexes every extra keyword as a per-row column, and TRL also passes
    ``trainer_state``, ``completion_ids``, ``log_extra`` and ``log_metric``.
    """
    from polo.tasks.rewards import resolve_reward

    task = load_task(task)

    def only_answer(name: str):
        fn = resolve_reward(task, name)

        def reward(prompts, completions, answer, **_):
            return fn(prompts=prompts, completions=completions, answer=answer)

        reward.__name__ = name
        return reward

    return [only_answer(s.name) for s in task.default_rewards], [s.weight for s in task.default_rewards]


def polo_trainer(model_dir: Path | None, setting: Setting, seed: int = 0, extra=(), task: dict = ADDITION):
    """polo's Trainer with the ``grpo`` recipe on ``setting`` and ``task`` (plus ``extra`` overrides);
    ``model_dir`` None: the warm-started default."""
    from polo.train.config import load_recipe
    from polo.train.trainer import Trainer

    overrides = [f"rollout.prompts_per_step={setting.prompts}", f"rollout.samples_per_prompt={setting.generations}",
                 f"rollout.max_new_tokens={setting.max_tokens}", f"train.minibatches={setting.minibatches}",
                 f"optim.lr={LR}", "train.threads=1", f"seed={seed}", *task_overrides(task)]
    if model_dir is not None:
        overrides.append(f"model.path={model_dir}")
    recipe = load_recipe("grpo", [*overrides, *extra])
    return Trainer(recipe, Path(tempfile.mkdtemp(prefix="polo-bench-run-")), log=lambda *a: None)


def trl_trainer(model_dir: Path, setting: Setting, steps: int, seed: int = 0, task: dict = ADDITION, config=None):
    """TRL's GRPOTrainer on the same work as :func:`polo_trainer`: same model folder, prompts (in polo's
    order), rewards, group size, completion cap, loss (``grpo`` = per-sequence token mean, PPO clip 0.2,
    no KL), AdamW at the same lr, grad clip 1, ``setting.minibatches`` updates per generation batch, no vLLM, plus
    ``config`` (more GRPOConfig fields). ``trainer.step_times`` (seconds between consecutive step ends) fills as
    ``trainer.train()`` runs."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, PrinterCallback, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    class StepTimer(TrainerCallback):
        def on_train_begin(self, *args, **kwargs):
            self.last = time.perf_counter()

        def on_step_end(self, *args, **kwargs):
            now = time.perf_counter()
            trainer.step_times.append(now - self.last)
            self.last = now

    examples = prompt_order(setting.prompts * steps, seed, task)  # steps generation batches (enough for the steps)
    data = Dataset.from_dict({"prompt": [e.prompt for e in examples], "answer": [e.answer for e in examples]})
    rewards, weights = reward_functions(task)
    args = GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="trl-bench-"), max_steps=steps, seed=seed,
        per_device_train_batch_size=setting.rows // setting.minibatches, steps_per_generation=setting.minibatches,
        num_generations=setting.generations,
        max_completion_length=setting.max_tokens, temperature=1.0, top_p=1.0, top_k=0,
        learning_rate=LR, lr_scheduler_type="constant", optim="adamw_torch", weight_decay=0.0,
        max_grad_norm=1.0, beta=0.0, epsilon=0.2, loss_type="grpo", scale_rewards="group", reward_weights=weights,
        shuffle_dataset=False, use_vllm=False, use_cpu=True, bf16=False, logging_steps=1, save_strategy="no",
        report_to="none", disable_tqdm=True, dataloader_num_workers=0, log_completions=False, **(config or {}),
    )
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    trainer = GRPOTrainer(model=model, reward_funcs=rewards, args=args, train_dataset=data, processing_class=tokenizer)
    trainer.remove_callback(PrinterCallback)
    trainer.add_callback(StepTimer())
    trainer.step_times = []
    return trainer


def trl_lengths(trainer) -> list[float]:
    """Mean completion length (tokens, EOS included) of each step TRL logged."""
    return [row["completions/mean_length"] for row in trainer.state.log_history if "completions/mean_length" in row]


# --------------------------------------------------------------------------- timing and reports
def timed(fn: Callable[[], object]) -> tuple[float, object]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def interleaved(cases: dict[str, Callable[[], object]], reps: int, warmup: int = 1):
    """Run the cases round-robin (A B C A B C ...) after ``warmup`` untimed rounds: ``(seconds, outputs)``,
    each a dict of per-repetition lists."""
    for _ in range(warmup):
        for fn in cases.values():
            fn()
    times: dict[str, list[float]] = {name: [] for name in cases}
    outputs: dict[str, list] = {name: [] for name in cases}
    for _ in range(reps):
        for name, fn in cases.items():
            seconds, out = timed(fn)
            times[name].append(seconds)
            outputs[name].append(out)
    return times, outputs


def median(xs) -> float:
    return statistics.median(xs)


def paired_ratio(num: list[float], den: list[float]) -> float:
    """Median over repetitions of ``num[i] / den[i]`` (measured back to back, so drift cancels)."""
    return median([a / b for a, b in zip(num, den)])


def case_table(doc: str, cases: list[tuple], run_case: Callable[..., list], title: str, header: list[str],
               quick: Callable[[list], list] = lambda cases: cases[:2]) -> None:
    """A component benchmark's main: ``--quick`` (``quick(cases)``, 2 repetitions) and ``--reps`` (default 5);
    ``run_case(*case, reps)`` gives each table row (printed as it comes); ``title`` may use ``{reps}``."""
    args = parse_args(doc.splitlines()[0], reps={"type": int, "default": None, "help": "timed repetitions"})
    reps = args.reps or (2 if args.quick else 5)
    rows = []
    for case in quick(cases) if args.quick else cases:
        rows.append(run_case(*case, reps))
        print(f"  {rows[-1]}", flush=True)
    print_table(title.format(reps=reps), header, rows)


def print_table(title: str, header: list[str], rows: list[list]) -> None:
    cells = [[f"{c:.3g}" if isinstance(c, float) else str(c) for c in row] for row in [header, *rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    print(f"\n## {title}")
    for k, row in enumerate(cells):
        print("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |")
        if k == 0:
            print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    sys.stdout.flush()


def write_marked(page: str | Path, marker: str, text: str) -> None:
    """Replace the text between ``<!-- MARKER:start -->`` and ``<!-- MARKER:end -->`` in ``page`` with ``text`` (a
    generated table); exits naming the page when it has not exactly one such block."""
    page = Path(page)
    start, end = f"<!-- {marker}:start -->", f"<!-- {marker}:end -->"
    new, n = re.subn(f"({re.escape(start)}\n).*?({re.escape(end)})", lambda m: m[1] + text + "\n" + m[2],
                     page.read_text(), flags=re.DOTALL)
    if n != 1:
        sys.exit(f"--write {page}: expected one '{start}' ... '{end}' block, found {n}")
    page.write_text(new)
