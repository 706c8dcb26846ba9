"""The ``inspo`` engine: ``multi_turn`` episodes under instructions that co-evolve with the policy (INSPO,
"Agentic Policy Optimization via Instruction-Policy Co-Evolution", arXiv:2512.01945; reconstructed from its
abstract, the numeric defaults ours).

The engine keeps a population of instructions with scores ``s_j`` and attribution counts ``n_j``. Each
question (group) samples one instruction with ``p_j ∝ exp(s_j/τ)`` (``mix_within_group``: each episode its
own; an instruction never attributed is sampled as if it had the best attributed score, so each gets tried);
the instruction is part of the prompt, ``"<instruction>|<context>"`` on every turn (never trained),
its id is ``extras["instruction"]`` on every row and ``meta["instruction"]`` in every turn record. After each
update the episode returns are attributed: ``s_j ← (1−α)s_j + α·mean(returns under I_j)`` for the
instructions used (the first attribution of a new instruction sets its score when ``first_sets``), ``n_j +=
#episodes``, and the root episodes enter a replay buffer of (instruction, question seed, transcript, return).
Every ``prune_every`` updates, before the next rollout: the ``k_prune`` lowest scores among instructions with
``n_j ≥ n_min`` are pruned (never below ``min_population``); up to ``k_new`` candidates are proposed from the
buffer, failures first (``proposer``: the template mutator of ``polo.methods.inspo.proposers``, or a
causal LM prompted with failure transcripts), each verified by one sampled episode on each of ``verify``
replayed questions with the current policy, and admitted when the verification mean is ≥ the median of ``s``
(score = that mean, count = ``verify``), while the population is under ``population``. The policy loss is
untouched. Held-out evaluation plays each test seed greedily under an instruction drawn from the current
population (a fixed generator, no training randomness drawn). ``expected_return`` measures a population:
``Σ_j p_j · mean return of I_j`` on given seeds.

Metrics: ``inspo/size``, ``inspo/best_score``, ``inspo/expected_score`` (``Σ p_j s_j``), ``inspo/top_prob``,
``inspo/initial_mass`` (probability on the initial instructions), ``inspo/sampled_return`` (mean return of the
step's episodes), ``inspo/pruned``, ``inspo/proposed``, ``inspo/admitted`` and, on the
``instructed_environment`` task, ``inspo/demo_epsilon`` (``Σ p_j ε(I_j)``: the warm-start noise the sampled
instructions stand for, a diagnostic the engine never uses).
"""
from __future__ import annotations

import random
from typing import Any, ClassVar, Literal

import torch
from pydantic import Field, PrivateAttr, model_validator

from polo.core.population import admitted, ema_scores, prune_indices, sampling_probs
from polo.core.registry import ConfigError
from polo.roles.http_judge import EndpointClient
from polo.policy.policy import Policy
from polo.engines.base import ENGINES, EngineSetup
from polo.methods.inspo.proposers import ModelProposer, mutate
from polo.engines.outer_loop import OuterLoopEngine
from polo.engines.multi_turn import MultiTurn
from polo.tasks.instructed import instructed


@ENGINES.register("inspo")
class Inspo(OuterLoopEngine):
    """``multi_turn`` under a co-evolving population of instructions (see the module docstring)."""

    paper: ClassVar[str] = "Agentic Policy Optimization via Instruction-Policy Co-Evolution (arXiv:2512.01945)"
    provenance: ClassVar[str] = "RECONSTRUCTED"
    provides = MultiTurn.provides | {"instruction"}
    row_key: ClassVar[str] = "instruction"

    instructions: list[str] | None = None
    """The initial population; None: ``population`` distinct random instructions of the task's grammar."""
    population: int = Field(8, ge=1)
    """N: the initial size and the most instructions kept (admission stops there)."""
    min_population: int = Field(4, ge=1)
    """N_min: pruning never leaves fewer."""
    population_seed: int = 0
    """Seed of the initial population drawn from the grammar."""
    tau: float = Field(0.1, gt=0)
    """τ of the sampling distribution ``p ∝ exp(s/τ)``."""
    alpha: float = Field(0.1, gt=0, le=1)
    """α of the attribution's moving average."""
    first_sets: bool = True
    """An instruction's first attribution sets its score (else it moves from 0 by α)."""
    mix_within_group: bool = False
    """Sample an instruction per episode instead of per question (groups then compare instructions too)."""
    prune_every: int = Field(20, ge=1)
    """P_prune: updates between evolution rounds (prune, propose, verify)."""
    k_prune: int = Field(2, ge=0)
    """Instructions pruned per round."""
    n_min: int = Field(32, ge=0)
    """Episodes attributed before an instruction can be pruned."""
    k_new: int = Field(2, ge=0)
    """Candidates proposed per round."""
    verify: int = Field(16, ge=1)
    """V: replayed questions a candidate is verified on (one sampled episode each)."""
    replay_size: int = Field(256, ge=1)
    """Root episodes kept in the replay buffer (the newest)."""
    fragments: list[str] | None = None
    """The mutator's words; None: the task's grammar (``instructed_environment``'s ``fragments``)."""
    proposer: Literal["mutator", "model"] = "mutator"
    """Who writes candidates: the template mutator, or a causal LM (``proposer_path`` or ``proposer_url``)."""
    proposer_path: str | None = None
    """model: a local causal-LM checkpoint folder (save_pretrained)."""
    proposer_url: str | None = None
    """model: an OpenAI-compatible base URL (``http://host:port/v1``) ..."""
    proposer_model: str | None = None
    """... and the model name it serves."""
    max_instruction_chars: int = Field(24, ge=1)
    """The longest instruction a model proposer may write."""

    _texts: list[str] = PrivateAttr(default_factory=list)
    _ids: list[int] = PrivateAttr(default_factory=list)
    _scores: list[float] = PrivateAttr(default_factory=list)
    _counts: list[int] = PrivateAttr(default_factory=list)
    _next_id: int = PrivateAttr(0)
    _initial: list[str] = PrivateAttr(default_factory=list)
    _replay: list[dict] = PrivateAttr(default_factory=list)
    _evolved_at: int = PrivateAttr(0)
    _step: list[dict] = PrivateAttr(default_factory=list)
    _events: dict[str, float] = PrivateAttr(default_factory=dict)
    _model: ModelProposer | None = PrivateAttr(None)

    @model_validator(mode="after")
    def _consistent(self) -> "Inspo":
        if self.min_population > self.population:
            raise ValueError(f"min_population={self.min_population} exceeds population={self.population}")
        if self.instructions is not None and len(set(self.instructions)) != len(self.instructions):
            raise ValueError(f"instructions repeat: {self.instructions}")
        if self.instructions is not None and not 1 <= len(self.instructions) <= self.population:
            raise ValueError(f"instructions: 1 to population={self.population} of them, got {len(self.instructions)}")
        if self.proposer == "model" and (self.proposer_path is None) == (self.proposer_url is None):
            raise ValueError("proposer: model needs exactly one of proposer_path (a local checkpoint) or proposer_url "
                             f"(an OpenAI-compatible endpoint); got path={self.proposer_path!r}, "
                             f"url={self.proposer_url!r}")
        if self.proposer_url is not None and self.proposer_model is None:
            raise ValueError(f"proposer_url={self.proposer_url!r} needs proposer_model (the served model's name)")
        return self

    # ------------------------------------------------------------- set-up
    def setup(self, setup: EngineSetup) -> None:
        super().setup(setup)
        task = setup.task
        if self.fragments is None and self.proposer == "mutator" and not hasattr(task, "fragments"):
            raise ConfigError(f"engine inspo: the mutator needs fragments: set engine.fragments or use task "
                              f"instructed_environment (task {task.name!r} has no grammar)")
        if self.instructions is None and not hasattr(task, "random_instruction"):
            raise ConfigError(f"engine inspo: set engine.instructions (the initial population); task {task.name!r} has "
                              f"no instruction grammar to draw them from")
        self._texts = list(self.instructions) if self.instructions is not None else self._draw(task)
        self._ids = list(range(len(self._texts)))
        self._scores, self._counts = [0.0] * len(self._texts), [0] * len(self._texts)
        self._next_id, self._initial = len(self._texts), list(self._texts)

    def _draw(self, task) -> list[str]:
        rng, out = random.Random(self.population_seed), []
        for _ in range(1000 * self.population):
            if len(out) == self.population:
                return out
            text = task.random_instruction(rng)
            if text not in out:
                out.append(text)
        raise ConfigError(f"engine inspo: the task's grammar gives fewer than population={self.population} distinct "
                          f"instructions ({len(out)}); lower population or add fragments")

    @property
    def words(self) -> list[str]:
        return list(self.fragments if self.fragments is not None else self.settings.task.words)

    # ------------------------------------------------------------- settings of episodes
    def probs(self) -> torch.Tensor:
        return sampling_probs(torch.tensor(self._scores, dtype=torch.float64), self.tau, torch.tensor(self._counts))

    def assign(self, n_examples: int, G: int, generator: torch.Generator) -> list:
        p = self.probs()
        if self.mix_within_group:
            index = torch.multinomial(p, n_examples * G, replacement=True, generator=generator)
        else:
            index = torch.multinomial(p, n_examples, replacement=True, generator=generator).repeat_interleave(G)
        return [self._texts[i] for i in index.tolist()]

    def eval_settings(self, n: int) -> list:
        index = torch.multinomial(self.probs(), n, replacement=True, generator=torch.Generator().manual_seed(0))
        return [self._texts[i] for i in index.tolist()]

    def setting_id(self, setting) -> int:
        return self._ids[self._texts.index(setting)]

    def apply(self, setting, episode, chat):
        return instructed(setting, self.plain_context(episode, chat))

    # ------------------------------------------------------------- the loop
    def rollout(self, policy, examples, prompt_index, generator, *, samples_per_prompt=None, greedy=False):
        got = super().rollout(policy, examples, prompt_index, generator, samples_per_prompt=samples_per_prompt,
                              greedy=greedy)
        episodes: dict[int, dict] = {}
        for r in got.turns:
            if r.depth == 0:
                e = episodes.setdefault(r.traj, {"instruction": self._texts[self._ids.index(r.meta["instruction"])],
                                                 "seed": r.seed, "transcript": r.context_text, "reward": 0.0})
                e["transcript"] = f"{r.context_text}{r.action};{r.observation}"
                e["reward"] += r.reward
        self._step += list(episodes.values())
        return got

    def before_rollout(self, policy, generator: torch.Generator) -> None:
        if self._updates and self._updates % self.prune_every == 0 and self._evolved_at != self._updates:
            self._evolved_at = self._updates
            self._events = self.evolve(policy, generator)

    def evolve(self, policy, generator: torch.Generator) -> dict[str, float]:
        """Prune, propose, verify and admit (one round); returns its counts."""
        scores, counts = torch.tensor(self._scores), torch.tensor(self._counts)
        gone = set(prune_indices(scores, counts, self.k_prune, self.n_min, self.min_population).tolist())
        for name in ("_texts", "_ids", "_scores", "_counts"):
            setattr(self, name, [v for i, v in enumerate(getattr(self, name)) if i not in gone])
        room = min(self.k_new, self.population - len(self._texts))
        candidates = self.propose(room, policy, generator) if room > 0 and self._replay else []
        accepted = 0
        if candidates:
            seeds = [self._replay[i]["seed"] for i in
                     torch.randperm(len(self._replay), generator=generator)[: self.verify].tolist()]
            means = self.play_settings(policy, candidates, seeds, 1, generator).mean(1)
            for text, mean, ok in zip(candidates, means.tolist(), admitted(means, torch.tensor(self._scores)).tolist()):
                if ok:
                    self._texts.append(text)
                    self._ids.append(self._next_id)
                    self._scores.append(mean)
                    self._counts.append(len(seeds))
                    self._next_id += 1
                    accepted += 1
        return {"inspo/pruned": float(len(gone)), "inspo/proposed": float(len(candidates)),
                "inspo/admitted": float(accepted)}

    def propose(self, k: int, policy, generator: torch.Generator) -> list[str]:
        if self.proposer == "mutator":
            return mutate(self._texts, self._scores, self._replay, self.words, k, generator)
        if self._model is None:
            self._model = self._build_model(policy)
        return self._model(self._texts, self._scores, self._replay, k, generator)

    def _build_model(self, policy) -> ModelProposer:
        if self.proposer_path is not None:
            model = Policy.load(self.proposer_path, device=policy.device)
            return ModelProposer(self.max_instruction_chars, policy=model)
        client = EndpointClient(self.proposer_url, self.proposer_model, max_tokens=self.max_instruction_chars,
                                temperature=1.0, cache=False)
        return ModelProposer(self.max_instruction_chars, client=client)

    def after_update(self, batch, context) -> dict[str, float]:
        row = super().after_update(batch, context)
        step, self._step = self._step, []
        used = torch.tensor([self._texts.index(e["instruction"]) for e in step], dtype=torch.long)
        returns = torch.tensor([e["reward"] for e in step], dtype=torch.float64)
        scores, counts = ema_scores(torch.tensor(self._scores, dtype=torch.float64), torch.tensor(self._counts), used,
                                    returns, self.alpha, self.first_sets)
        self._scores, self._counts = scores.tolist(), counts.tolist()
        self._replay = (self._replay + step)[-self.replay_size:]
        p = self.probs()
        row.update({"inspo/size": float(len(self._texts)), "inspo/best_score": max(self._scores),
                    "inspo/expected_score": float((p * scores).sum()), "inspo/top_prob": float(p.max()),
                    "inspo/initial_mass": sum(pi for pi, t in zip(p.tolist(), self._texts) if t in self._initial),
                    "inspo/sampled_return": float(returns.mean()) if len(step) else 0.0,
                    "inspo/pruned": 0.0, "inspo/proposed": 0.0, "inspo/admitted": 0.0, **self._events})
        self._events = {}
        task = self.settings.task
        if hasattr(task, "epsilon"):
            row["inspo/demo_epsilon"] = float(sum(pi * task.epsilon(t) for pi, t in zip(p.tolist(), self._texts)))
        return row

    def expected_return(self, policy, texts: list[str], probs: torch.Tensor, seeds: list[int], G: int,
                        generator: torch.Generator) -> tuple[float, list[float]]:
        """``(Σ_j p_j·R̄_j, [R̄_j])``: the mean return ``R̄_j`` of each instruction over ``G`` sampled episodes on
        each of ``seeds``, and its average under the sampling probabilities ``probs`` (a population's expected
        reward for an instruction sampled from it)."""
        means = self.play_settings(policy, texts, seeds, G, generator).mean(1)
        return float((probs.double() * means).sum()), means.tolist()

    # ------------------------------------------------------------- checkpoint
    def loop_state(self) -> dict[str, Any]:
        return {"texts": list(self._texts), "ids": list(self._ids), "scores": list(self._scores),
                "counts": list(self._counts), "next_id": self._next_id, "initial": list(self._initial),
                "replay": [dict(e) for e in self._replay], "evolved_at": self._evolved_at}

    def load_loop_state(self, state: dict[str, Any]) -> None:
        self._texts, self._ids = list(state["texts"]), [int(i) for i in state["ids"]]
        self._scores, self._counts = [float(s) for s in state["scores"]], [int(n) for n in state["counts"]]
        self._next_id, self._initial = int(state["next_id"]), list(state["initial"])
        self._replay, self._evolved_at = [dict(e) for e in state["replay"]], int(state["evolved_at"])

    @property
    def population_texts(self) -> list[str]:
        return list(self._texts)

    @property
    def initial_population(self) -> list[str]:
        return list(self._initial)
