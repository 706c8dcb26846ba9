"""Recipe configuration: YAML recipes, ``key.sub=value`` overrides and validation with clear errors.

A recipe picks one registered component per pipeline stage (``engine``, ``prompt_sampler``, ``shaping``,
``advantage``, ``credit``, ``policy_loss``, ``aggregation``, ``kl``, ``optimizer_hook``), configures model
roles (``roles``) and sets the loop's hyperparameters. Every key is validated: an unknown key or a wrong type
names the key; an unknown component name lists the valid ones; a component whose inputs no engine or
provider can supply, and a micro-batch size that would split the groups a component needs whole, are refused
(``polo.train.run.build_run`` builds and checks them; the validated recipe keeps that run for its trainer).
"""
from __future__ import annotations

import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, Field, PrivateAttr, ValidationError, field_validator, model_validator

from polo.core.registry import ADVANTAGES, AGGREGATIONS, DIVERGENCES, POLICY_LOSSES, ConfigError, Settings
from polo.core.suggest import unknown_key
from polo.dist.fsdp_settings import FSDPSettings
from polo.policy.lora import LoraConfig
from polo.policy.kinds import KINDS
from polo.policy.packing import PackRows
from polo.policy.tiny import TinyModelConfig
from polo.policy.vision_settings import VisionTowerConfig
from polo.engines.base import ENGINES
from polo.engines.guided import hint_engine
from polo.prompt_samplers.base import PROMPT_SAMPLERS
from polo.tasks.paths import absolute_path
from polo.tasks.plugins import is_loaded
from polo.tasks.registry import normalize_task_config
from polo.tasks.rewards import RewardSpec
from polo.train.backends import check_backends
from polo.train.files import write_text_atomic
from polo.train.run import STAGES, Run, build_run
from polo.train.yaml_files import load_yaml, read_yaml_mapping

RECIPES_DIR = Path(__file__).resolve().parent.parent / "recipes"


class Model(Settings):
    kind: str = "causal"
    """Policy kind (polo.policy.kinds): ``causal`` (an autoregressive LM), ``diffusion`` (a masked diffusion LM)
    or ``vision`` (a vision-language model; prompts carry images)."""
    path: str | None = None
    """Local Hugging Face checkpoint folder (of the kind's family); None builds and warm-starts the built-in model."""
    tiny: TinyModelConfig = TinyModelConfig()
    vision: VisionTowerConfig = VisionTowerConfig()
    """Image tower of the built-in vision-language model (``kind: vision``)."""
    lora: LoraConfig = LoraConfig()
    chat_template: bool = False
    """Render prompts with the checkpoint tokenizer's chat template (when it has one)."""
    device: str = "cpu"
    """Where the policy, its reference and critic copies and the sampler run: ``cpu``, ``cuda`` or ``cuda:N``
    (rollout batches, rewards and the loss math stay on the host; the warm start runs on the CPU)."""
    dtype: Literal["float32", "bfloat16"] = "float32"
    """Compute precision of the model calls: ``bfloat16`` runs them under torch.autocast (bfloat16 matmuls);
    parameters (the optimizer's master weights), checkpoints, log-probs, values and losses stay float32."""

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, kind: str) -> str:
        if kind not in KINDS:
            raise ValueError(f"model.kind: expected one of {', '.join(KINDS)}, got {kind!r}")
        return kind

    @field_validator("device")
    @classmethod
    def _device_name(cls, name: str) -> str:
        if not re.fullmatch(r"cpu|cuda(:\d+)?", name):
            raise ValueError(f"model.device: expected cpu, cuda or cuda:N (N a device index), got {name!r}")
        return name


class WarmStart(Settings):
    """Supervised warm start of the built-in model on the task's demonstrations (cached).

    Training stops as soon as greedy accuracy on held-out *training-split* problems reaches
    ``target_accuracy`` (checked every ``check_every`` steps), or after ``steps``: a fixed step count
    lands anywhere between 4 % and 64 % depending on the seed, the target lands where RL has room.
    """

    steps: int = Field(1000, ge=0)
    """Most warm-start steps; 0 skips the warm start."""
    batch_size: int = Field(64, gt=0)
    """Demonstrations per warm-start step."""
    lr: float = Field(3e-3, gt=0)
    """Warm-start AdamW learning rate (linear warm-up over 20 steps)."""
    examples: int = Field(2000, gt=0)
    """Distinct training problems shown (a small set keeps the warm start imperfect)."""
    target_accuracy: float | None = Field(0.35, gt=0, le=1)
    """Stop once greedy accuracy reaches this; None: run all ``steps``."""
    check_every: int = Field(10, gt=0)
    """Steps between accuracy checks."""
    check_size: int = Field(200, gt=0)
    """Held-out training-split problems per accuracy check."""
    hinted: float = Field(0.0, ge=0, lt=1)
    """Share of each step's demonstration rows shown under the ``guided`` engine's hinted prompt (its ``template``,
    its written hint from ``source`` at the largest of its ``levels``), so that the built-in model, which never saw a
    hint, can read one as an LLM reads the hints of KEPO and RGPO; 0: none (the accuracy target is still checked on
    the plain prompts)."""


class Rollout(Settings):
    prompts_per_step: int = Field(64, gt=0)
    """Distinct prompts sampled per training step."""
    samples_per_prompt: int = Field(8, gt=0)
    """Completions per prompt (the group size G)."""
    max_new_tokens: int | None = Field(None, gt=0)
    """None: the task's longest correct completion + 1 (for the EOS token)."""
    temperature: float = Field(1.0, gt=0)
    """Sampling temperature of the rollouts."""
    top_p: float = Field(1.0, gt=0, le=1)
    """Nucleus sampling mass; 1: off."""
    top_k: int = Field(0, ge=0)
    """Sample among the k most likely tokens; 0: off."""
    mask_truncated: bool = False
    """Exclude completions that hit ``max_new_tokens`` without EOS from the loss (DAPO, verl)."""
    compile_decode: bool = False
    """Run polo's sampler's one-token decode steps through ``torch.compile`` (``Policy.decode_step_model``): the
    compilation takes tens of seconds once per process, after which each decode step is cheaper; it pays back on
    long completions and long runs only (the break-even is in docs/performance.md, "Speed to the machine's limit
    (issue #33)"). Sampling stays deterministic for a seed, but the compiled kernels round differently from the
    eager ones, so the tokens drawn may differ from an uncompiled run's. Engines that generate elsewhere (vLLM)
    ignore it."""


class Kl(Settings):
    """KL(π‖π_ref) loss term: ``coef · agg(divergence(logp, ref_logp))``; coef 0 needs no reference."""

    name: str = DIVERGENCES.default
    """KL estimator (a registered divergence: k1, k2, k3, ...)."""
    coef: float = Field(0.0, ge=0)
    """Weight of the KL loss term; 0: no KL term and no reference model."""
    target: float | None = Field(None, gt=0)
    """Adaptive KL controller (Ziegler et al. 2019): with a target, the coefficient of the KL in use (this
    loss term, or the advantage's ``kl_coef`` for KL-in-reward) follows
    ``β ← β·(1 + clip(KL/target − 1, −0.2, 0.2)·B/horizon)`` after every step."""
    horizon: int = Field(10000, gt=0)
    """Horizon of the adaptive controller (in samples; used with ``target``)."""


class Optim(Settings):
    lr: float = Field(5e-4, gt=0)
    """AdamW learning rate of the policy."""
    betas: tuple[Annotated[float, Field(ge=0, lt=1)], Annotated[float, Field(ge=0, lt=1)]] = (0.9, 0.999)
    """AdamW betas."""
    weight_decay: float = Field(0.0, ge=0)
    """AdamW weight decay."""
    grad_clip: float | None = Field(1.0, gt=0)
    """Gradient-norm clip; None: off."""
    schedule: Literal["constant", "linear", "cosine"] = "constant"
    """Learning-rate decay after the warm-up, over ``train.steps``."""
    warmup_steps: int = Field(0, ge=0)
    """Steps of linear learning-rate warm-up."""
    min_lr_ratio: float = Field(0.0, ge=0, le=1)
    """Final learning rate of a linear or cosine schedule, as a fraction of ``lr``."""


class Loop(Settings):
    steps: int = Field(300, gt=0)
    """Training steps (one rollout batch each)."""
    epochs: int = Field(1, gt=0)
    """Passes over each rollout batch (PPO epochs)."""
    minibatches: int = Field(1, gt=0)
    """Optimizer steps per epoch; the batch is split into this many minibatches."""
    micro_batch_size: int | None = Field(None, gt=0)
    """Rows per forward/backward (gradient accumulation); None: the whole minibatch."""
    micro_batch_tokens: int | None = Field(None, gt=0)
    """Most padded tokens per forward/backward, ``rows × (longest prompt + response width)`` of the micro-batch
    (consecutive rows, whole groups when a component needs them); with ``micro_batch_size`` both limits apply. A
    row (or whole group) above it alone is a micro-batch of its own. None: no token limit."""
    gradient_checkpointing: bool = False
    """Recompute each layer's activations in the backward instead of storing them (Hugging Face gradient
    checkpointing, non-reentrant): less memory in the training forward for about one more forward of compute;
    sampling keeps its KV cache."""
    pack_rows: PackRows = "auto"
    """Run the policy's and the critic's log-prob / value forwards (the update, old and reference log-probs) on
    packed rows: each row's real prompt ++ response tokens laid end to end, position ids restarting per sequence,
    attention kept within each sequence (polo.policy.packing), instead of padded rows with prompt sharing (the G
    samples of a prompt share one forward over it). ``auto``: packed where that computes fewer token positions,
    ``R·W`` packed vs ``U·Tp + B·Tc`` padded (U distinct prompts); measured on the task ladder's shapes (8
    samples a prompt, ≤ 128 / 256 tokens) the update takes 0.86 / 0.72 × the time packed, and on short answers
    to repeated prompts (8 × 8, ≤ 8 tokens) 1.47 × (docs/performance.md, "Packed rows"): ``auto`` is the default
    because it picks the faster path in both. Same results up to float rounding."""
    train_pool: int = Field(5000, gt=0)
    """Distinct training problems the prompt stream cycles through."""
    eval_every: int = Field(25, gt=0)
    """Steps between held-out greedy evaluations (and after the last step)."""
    eval_size: int = Field(500, gt=0)
    """Test-split problems per evaluation."""
    save_every: int = Field(25, gt=0)
    """Steps between checkpoints (and after the last step)."""
    max_minutes: float | None = Field(None, gt=0)
    """Wall-clock budget: the run stops (with a checkpoint and a final eval) when it is spent."""
    threads: int | None = Field(None, gt=0)
    """torch CPU threads; None: 1 for the built-in tiny model (more threads only add synchronization
    cost at its size, and spin badly on a shared machine), torch's default for a checkpoint."""
    skip_zero_advantage_rows: bool = True
    """Leave rows whose advantages are all 0 out of the update's forward/backward when that cannot change the
    gradient (the policy loss is the only term and ``inert_at_zero_advantage``); ``policy/*`` metrics then
    cover the other rows."""
    replay_steps: int = Field(0, ge=0)
    """Also train on the batches of the last ``replay_steps`` steps (stale samples keep their own
    behaviour log-probs and advantages; R²VPO)."""
    async_staleness: int = Field(0, ge=0)
    """Asynchronous RL: generate the next k steps' rollouts while this step's update runs (samples at most k
    policy versions old; needs ``credit: rollout_is``, which corrects the staleness by importance sampling);
    0: synchronous."""
    max_nonfinite_skips: int = Field(3, ge=0)
    """Optimizer steps with a non-finite loss or gradient are skipped; the run stops with an error once more
    than this many were skipped (the last checkpoint, written before, stays clean)."""
    log_samples_every: int = Field(0, ge=0)
    """Every N steps, write ``log_samples`` rows of the batch (prompt, completion, rewards, advantage) to
    ``RUN/samples.jsonl`` and print them as a table; 0: off (docs/logging.md)."""
    log_samples: int = Field(4, gt=0)
    """Rows of each sample table, spread over the batch."""
    report_to: list[str] = ["jsonl"]
    """Logging backends: ``jsonl`` (metrics.jsonl, always written), ``csv``, ``tensorboard``, ``wandb``
    (docs/logging.md)."""

    @field_validator("report_to")
    @classmethod
    def _known_backends(cls, names: list[str]) -> list[str]:
        return check_backends(names)

    @model_validator(mode="after")
    def _micro_batch_limits_agree(self) -> "Loop":
        size, tokens = self.micro_batch_size, self.micro_batch_tokens
        if size is not None and tokens is not None and tokens < 2 * size:
            raise ValueError(f"train.micro_batch_tokens={tokens} cannot hold train.micro_batch_size={size} rows: a "
                             f"row has at least one prompt and one response token, so {size} rows need at least "
                             f"{2 * size} tokens; raise micro_batch_tokens or lower micro_batch_size (or unset one)")
        return self


class Dist(Settings):
    """Scale-out (docs/scaling.md): where rollouts and rewards run, and the data-parallel learner."""

    backend: Literal["local", "ray"] = "local"
    """``local``: every stage in this process; ``ray``: rollouts on ``rollout_workers`` Ray actors (and rewards on
    ``reward_workers``), the learner here gathering their batches and broadcasting weights after each update."""
    address: str | None = None
    """Ray cluster to join (``ray://host:port`` or ``auto``); None starts a local cluster."""
    rollout_workers: int = Field(2, gt=0)
    """Ray actors that each hold an engine and generate a share of every step's prompts."""
    reward_workers: int = Field(0, ge=0)
    """Ray actors that score completions (slow reward functions: sandboxes, judges); 0: scored by the rollout
    workers."""
    worker_threads: int = Field(1, gt=0)
    """torch CPU threads of each Ray worker."""
    max_restarts: int = Field(3, ge=0)
    """Times a dead Ray worker is restarted (its prompts re-issued) before the run stops with an error."""
    learners: int = Field(1, gt=0)
    """Data-parallel learner ranks that ``polo train`` launches as Ray actors (a local cluster unless
    ``address``), the alternative to ``torchrun --nproc_per_node N``; 1: this process (under torchrun its
    ``WORLD_SIZE`` decides)."""
    learner_backend: Literal["auto", "gloo", "nccl"] = "auto"
    """torch.distributed backend of a data-parallel learner (``torchrun --nproc_per_node N``); auto: nccl on
    cuda, gloo on cpu."""
    shard: Literal["replicate", "fsdp"] = "replicate"
    """``replicate``: every learner rank holds the whole policy and its optimizer state (gradients summed over
    ranks); ``fsdp``: parameters, gradients and optimizer state sharded over the ranks with FSDP2 (``fully_shard``, per
    decoder layer then the root), for models that do not fit one device (docs/scaling.md)."""
    fsdp: FSDPSettings = FSDPSettings()


class Recipe(Settings):
    name: str = Field("custom", pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.+-]*$", max_length=100)
    """Names the run folder (``output_dir/NAME_sSEED_TIME``): letters, digits and ``_.+-``, no path parts."""
    description: str = ""
    """One line on the method, shown by ``polo list``."""
    seed: int = 0
    """Seeds the model, the problems, the prompt stream and sampling."""
    task: dict[str, Any] = {"name": "addition"}
    """``{name, knobs...}`` of a registered task."""
    rewards: list[dict[str, Any]] | None = None
    """[{name, weight}]; None: the task's default reward components."""
    model: Model = Model()
    roles: dict[str, dict[str, Any]] = {}
    """Settings of model roles by name (``critic: {lr: 1e-3}``, ``masking_policy: {top_p: 0.9}``); a role is
    built when a chosen component's inputs need it, or (a role that wraps the policy) when it is listed."""
    warm_start: WarmStart = WarmStart()
    engine: dict[str, Any] | str = {"name": ENGINES.default}
    """Rollout engine: how completions are generated."""
    rollout: Rollout = Rollout()
    prompt_sampler: dict[str, Any] | str = {"name": PROMPT_SAMPLERS.default}
    """Which prompts each step draws (and which groups it keeps)."""
    shaping: list[dict[str, Any]] = []
    """Extra reward components computed from the rollouts, each ``{name, knobs...}``."""
    advantage: dict[str, Any] | str = {"name": ADVANTAGES.default}
    """Advantage estimator."""
    credit: dict[str, Any] | str | None = None
    """Per-token weights that multiply the advantages after estimation; None: none."""
    policy_loss: dict[str, Any] | str = {"name": POLICY_LOSSES.default}
    """Per-token policy loss."""
    aggregation: dict[str, Any] | str = {"name": AGGREGATIONS.default}
    """How token losses are reduced to one scalar."""
    regularizers: list[dict[str, Any]] = []
    """Loss terms beside the policy loss, each ``{name, coef, knobs...}`` averaged over its own tokens
    (distillation from a teacher, evidence channels, ...)."""
    kl: Kl = Kl()
    optimizer_hook: dict[str, Any] | str | None = None
    """Learning-rate multiplier computed from each step's gradients; None: none."""
    entropy_coef: float = 0.0
    """Weight of the entropy bonus (subtracted from the loss)."""
    optim: Optim = Optim()
    train: Loop = Loop()
    dist: Dist = Dist()
    output_dir: str = "runs"
    """Folder the run folders are created in."""
    plugins: list[str] = []
    """Python files the run's components come from, recorded absolute (``polo --plugin`` adds its files);
    ``polo eval`` and ``--resume`` refuse to start until they are loaded again with ``--plugin``, naming them."""
    _run: Run | None = PrivateAttr(None)

    @field_validator("task")
    @classmethod
    def _task_paths(cls, task: dict[str, Any]) -> dict[str, Any]:
        return normalize_task_config(task)

    @field_validator("plugins")
    @classmethod
    def _plugin_paths(cls, plugins: list[str]) -> list[str]:
        return [absolute_path(p) for p in plugins]

    @model_validator(mode="after")
    def _components_fit(self) -> "Recipe":
        self._run = build_run(self)
        if self.warm_start.hinted and not hint_engine(self._run.engine):
            raise ValueError(f"warm_start.hinted={self.warm_start.hinted} shows demonstrations under the guided "
                             f"engine's hinted prompt; the engine is {self.engine!r}: expected engine guided with "
                             f"inject generate and source answer or rationale, or warm_start.hinted 0")
        return self

    def __eq__(self, other: object) -> bool:
        """Recipes are equal when their settings are (the runs they built are not compared)."""
        return type(other) is type(self) and self.__dict__ == other.__dict__

    def built(self) -> Run:
        """The run built when this recipe was validated (``build_run``); built anew for a copy of the recipe
        (``model_copy``) and once a trainer has taken it."""
        if self._run is None or self._run.recipe is not self:
            self._run = build_run(self)
        return self._run

    def take_run(self) -> Run:
        """``built()``, handed to one trainer: its components and roles then carry that run's state, so the next
        caller gets a fresh build."""
        run = self.built()
        self._run = None
        return run


COMPONENT_KEYS = (*STAGES, "roles")


def _set_path(tree: dict, dotted: str, value: Any) -> None:
    """Set ``dotted`` in ``tree``; a top-level key the tree lacks starts from the Recipe's default when that is a
    mapping (``task.digits=3`` → ``task: {name: addition, digits: 3}``)."""
    keys = dotted.split(".")
    node = tree
    for depth, k in enumerate(keys[:-1]):
        child = node.get(k)
        if isinstance(child, str) and k in COMPONENT_KEYS:
            child = {"name": child}
        if child is None and depth == 0 and k in Recipe.model_fields:
            child = Recipe.model_fields[k].get_default(call_default_factory=True)
        if child is None or isinstance(child, Settings):
            child = {}
        if not isinstance(child, dict):
            raise ConfigError(f"override {dotted!r}: {k!r} is not a section (it is {child!r})")
        node[k] = child
        node = child
    node[keys[-1]] = value


def parse_overrides(overrides: list[str]) -> list[tuple[str, Any]]:
    parsed = []
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r}: expected key.sub=value")
        key, raw = item.split("=", 1)
        try:
            parsed.append((key.strip(), load_yaml(raw, f"override {item!r}") if raw != "" else None))
        except yaml.YAMLError:
            raise ConfigError(f"override {item!r}: the value is not valid YAML") from None
    return parsed


def resolve_shipped(name_or_path: str | Path, folder: Path, kind: str) -> Path:
    """A YAML path, or the name of a file shipped in ``folder`` (``grpo`` or ``grpo.yaml``)."""
    path = Path(name_or_path)
    if path.is_file():
        return path
    shipped = folder / (path.name if path.suffix else f"{path.name}.yaml")
    if shipped.is_file():
        return shipped
    names = ", ".join(sorted(p.stem for p in folder.glob("*.yaml")))
    raise ConfigError(f"{kind} {str(name_or_path)!r} not found; shipped {kind}s: {names}")


def resolve_recipe_path(recipe: str | Path) -> Path:
    return resolve_shipped(recipe, RECIPES_DIR, "recipe")


def validation_message(err: ValidationError, model: type[BaseModel]) -> str:
    """One line per problem, each naming its key: unknown keys (with the closest valid key of ``model``'s section
    and the section's keys), wrong types, failed checks."""
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"])
        if e["type"] == "extra_forbidden":
            lines.append(unknown_key(model, e["loc"]))
        elif e["type"] == "value_error":
            lines.append(f"{loc + ': ' if loc else ''}{e['ctx']['error'] if 'ctx' in e else e['msg']}")
        else:
            lines.append(f"{loc}: {e['msg']} (got {e.get('input')!r})")
    return "; ".join(lines)


def load_recipe(recipe: str | Path | dict, overrides: list[str] = ()) -> Recipe:
    """Read a recipe (path, shipped name or dict), apply overrides, validate."""
    if isinstance(recipe, dict):
        tree = dict(recipe)
    else:
        path = resolve_recipe_path(recipe)
        tree = read_yaml_mapping(path, "a recipe")
    for key, value in parse_overrides(list(overrides)):
        _set_path(tree, key, value)
    require_recipe_plugins(tree, "the recipe" if isinstance(recipe, dict) else str(path))
    try:
        return Recipe.model_validate(tree)
    except ValidationError as err:
        raise ConfigError("invalid recipe: " + validation_message(err, Recipe)) from None


def with_plugins(recipe: Recipe, plugins: Sequence[str]) -> Recipe:
    """``recipe`` also recording the plugin files ``plugins`` (absolute, each once); ``recipe`` itself (and the run
    it built) when they add none."""
    paths = list(dict.fromkeys([*recipe.plugins, *(absolute_path(p) for p in plugins)]))
    return recipe if paths == recipe.plugins else recipe.model_copy(update={"plugins": paths})


def require_recipe_plugins(tree: dict[str, Any], where: str) -> None:
    """Refuse a recipe tree whose ``plugins`` files are not loaded yet. polo never imports code because a recipe
    or a run folder names it (a crafted config.yaml must not run code on ``polo eval``): the user passes the
    files with ``--plugin`` (or ``load_plugin`` in Python), and the message says which."""
    plugins = tree.get("plugins")
    missing = [p for p in (plugins if isinstance(plugins, list) else []) if isinstance(p, str) and not is_loaded(p)]
    if missing:
        flags = " ".join(f"--plugin {p}" for p in missing)
        raise ConfigError(f"{where} was made with plugin files that are not loaded: {', '.join(missing)}; polo does "
                          f"not run code named by a recipe or run folder on its own: if you trust them, add {flags} "
                          f"before the command (polo {flags} eval|train ...), or load_plugin() them in Python")


def resolved_tree(recipe: Recipe) -> dict[str, Any]:
    """The recipe as a plain tree with every component's and every configured role's full settings, defaults
    filled in (what a run's config.yaml holds)."""
    return recipe.built().tree()


def dump_recipe(recipe: Recipe) -> str:
    return yaml.safe_dump(resolved_tree(recipe), sort_keys=False)


EXTENDABLE = ("train.steps", "train.max_minutes")
"""Keys a resumed run may change (``polo train --resume RUN train.steps=600`` extends a finished run)."""


def save_config(tree: dict[str, Any], run_dir: Path) -> None:
    """Write a run's ``resolved_tree`` to ``run_dir/config.yaml`` atomically (a temporary file renamed into
    place)."""
    write_text_atomic(Path(run_dir) / "config.yaml", yaml.safe_dump(tree, sort_keys=False))


def flatten_tree(tree: Any, prefix: str = "") -> dict[str, Any]:
    """``{"optim": {"lr": 1e-4}}`` → ``{"optim.lr": 1e-4}`` (lists are leaves)."""
    if isinstance(tree, dict):
        return {k: v for key, sub in tree.items() for k, v in flatten_tree(sub, f"{prefix}{key}.").items()}
    return {prefix[:-1]: tree}


def config_changes(trained: dict, now: dict, allowed: tuple[str, ...] = EXTENDABLE) -> list[str]:
    """``key: old → new`` for every setting of ``now`` that differs from ``trained`` (both ``resolved_tree``s),
    except the ``allowed`` keys and ``plugins`` (where components come from, not a setting). A setting added to
    polo after the run was trained counts as unchanged when ``now`` holds its default."""
    try:  # fill in the settings the trained tree predates with their defaults
        trained = resolved_tree(Recipe.model_validate(trained))
    except (ValidationError, ConfigError):  # a key since removed or renamed: compared as written
        pass
    old, new = flatten_tree(trained), flatten_tree(now)
    return [f"{k}: {old.get(k, '(absent)')!r} → {new.get(k, '(absent)')!r}" for k in sorted(old.keys() | new.keys())
            if k not in allowed and k != "plugins" and old.get(k, ...) != new.get(k, ...)]


def default_run_dir(recipe: Recipe) -> Path:
    """``output_dir/NAME_sSEED_YYYYmmdd-HHMMSS``: a new folder for every run."""
    return Path(recipe.output_dir) / f"{recipe.name}_s{recipe.seed}_{time.strftime('%Y%m%d-%H%M%S')}"


def with_rewards(recipe: Recipe, rewards: Sequence[Any]) -> Recipe:
    """``recipe`` with its reward list replaced by ``rewards``: names, ``(name, weight)``, Python functions or
    ``(function, weight)`` (a function is registered under its ``__name__``; see ``RewardSpec.of``)."""
    specs = [RewardSpec.of(r) for r in rewards]
    return load_recipe({**recipe.model_dump(), "rewards": [{"name": s.name, "weight": s.weight} for s in specs]})


def load_run_config(run_dir: Path, overrides: list[str] = ()) -> Recipe:
    """A run's recipe from its config.yaml, with only ``EXTENDABLE`` overrides allowed; an empty or missing
    config.yaml is an error, never the default recipe."""
    path = Path(run_dir) / "config.yaml"
    if not path.is_file() or not path.read_text().strip():
        raise ConfigError(f"{path} is {'empty' if path.is_file() else 'missing'}: the run's configuration is lost, "
                          f"so it cannot be resumed; start a new run")
    refused = [key for key, _ in parse_overrides(list(overrides)) if key not in EXTENDABLE]
    if refused:
        raise ConfigError(f"polo train --resume changes only {', '.join(EXTENDABLE)}; refused: {', '.join(refused)} "
                          f"(start a new run to change anything else)")
    return load_recipe(path, overrides)
