"""The judge role: a model that scores each (prompt, completion) pair on one or more criteria, never trained.

``roles: {judge: {backend: ...}}`` picks one of three back ends; ``build(policy)`` returns a ``Judge``:

* ``classifier``: a local sequence-classification reward model (``path``); the score of a pair is the
  model's scalar output for (rendered template, completion), unbounded.
* ``causal``: a local causal LM (``path``; none: a frozen copy of the policy as training starts, i.e. the
  warm-started built-in model when ``model.path`` is unset) reads the rendered template and is scored by
  its next-token verdict: with verdict strings (yes, no) and ``log p(v) = Σ_i log p(v_i | text, v_<i)``
  summed over a verdict's tokens, ``score = p(yes) / (p(yes) + p(no)) = σ(log p(yes) − log p(no))``.
* ``http``: an OpenAI-compatible endpoint (``polo.roles.http_judge``); the reply's score is read by
  ``score_pattern`` and mapped onto [0, 1] (``parse_score``).
* ``rule``: no model: each criterion names a reward of the run's task (``rule``: the task's own, e.g.
  ``correct``, or a registered one, e.g. ``digit_match``), and its score is that reward divided by the reward's
  declared largest value when it has one. A stand-in named as such, for recipes whose paper judges with a
  model that polo cannot ship (MBA's MLLM judge): it gives the judged shaping a signal that follows the task.

A template may use ``{prompt}``, ``{response}``, ``{answer}`` (the example's reference answer) and
``{rubric}`` (the example's ``rubric`` column, empty when it has none). ``criteria`` gives several named
templates (or rules) (a multi-dimensional judge: one score column each, in order); without it the judge has one
criterion, ``score``, with ``template``. A judgment that fails (an endpoint timeout, an unparseable reply, a
text longer than the local model's context, a non-finite score) is NaN with a counted reason, never an
exception.
"""
from __future__ import annotations

import math
import os
import re
import string
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Literal, Sequence

import torch
from pydantic import Field, model_validator
from torch import Tensor

from polo.core.registry import ConfigError, Settings
from polo.core.templates import render
from polo.roles.http_judge import EndpointClient, parse_score
from polo.policy.inputs import pad_sequences, trim_left_padding
from polo.policy.policy import Policy
from polo.policy.reference import frozen_copy, frozen_load
from polo.policy.reward_model import RewardModel
from polo.roles.base import ROLES, Role

FIELDS = ("prompt", "response", "answer", "rubric")
"""The fields a judge template may use."""
TEMPLATES = {
    "causal": "{prompt}{response}\nCorrect?",
    "http": "Question: {prompt}\nReference answer: {answer}\nResponse: {response}\n"
            "Is the response correct? Answer yes or no.\n",
    "classifier": "{prompt}",
}
"""The default template of each back end (the classifier reads the rendered template, then the completion)."""


@dataclass
class Scored:
    """A back end's scores of N texts: ``scores`` ``[N]`` (NaN where it failed) and each text's failure reason."""

    scores: Tensor
    reasons: list[str | None]
    details: dict[str, str] = field(default_factory=dict)
    """One failure's detail per reason (for the log)."""


@dataclass
class Judgments:
    """``scores`` ``[B, D]`` (criteria in order; NaN where the judgment failed), ``failures`` per reason."""

    scores: Tensor
    failures: Counter
    details: dict[str, str]


def template_fields(template: str) -> set[str]:
    """The ``{field}`` names a template uses."""
    return {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}


class Judge:
    """Scores (example, completion) pairs on each criterion with a back end ``scorer(texts, completions) ->
    Scored``; the texts are the criteria's rendered templates, row-major (sample, criterion)."""

    def __init__(self, criteria: Sequence[tuple[str, str]], scorer: Callable[[list[str], list[str]], Scored]):
        self.names = tuple(name for name, _ in criteria)
        self.templates = tuple(template for _, template in criteria)
        self.scorer = scorer

    def __call__(self, examples: Sequence, completions: Sequence[str]) -> Judgments:
        B, D = len(completions), len(self.templates)
        texts = [render(t, e, c) for e, c in zip(examples, completions) for t in self.templates]
        scored = self.scorer(texts, [c for c in completions for _ in self.templates])
        scores = scored.scores.float().reshape(B, D)
        reasons = [r if r is not None or math.isfinite(s) else "non_finite"
                   for r, s in zip(scored.reasons, scores.flatten().tolist())]
        scores = scores.masked_fill(torch.tensor([r is not None for r in reasons]).reshape(B, D), math.nan)
        details = {**scored.details, **({"non_finite": "the back end gave a NaN or infinite score"}
                                        if "non_finite" in reasons else {})}
        return Judgments(scores, Counter(r for r in reasons if r is not None), details)


class RuleJudge:
    """The rule back end: criterion k's score of a completion is the task's reward ``rules[k]`` of it, divided by
    that reward's largest value where it declares a finite one; never fails."""

    def __init__(self, names: Sequence[str], rules: Sequence[str], rule_scores: Callable):
        self.names, self.rules, self.rule_scores = tuple(names), list(rules), rule_scores

    def __call__(self, examples: Sequence, completions: Sequence[str]) -> Judgments:
        values, maxima = self.rule_scores(self.rules, examples, completions)
        scale = torch.where(maxima.isfinite() & (maxima > 0), maxima, torch.ones_like(maxima))
        return Judgments(values.float() / scale.float(), Counter(), {})


class VerdictScorer:
    """The causal back end: ``σ(log p(yes | text) − log p(no | text))`` from one forward of each text followed by
    each verdict (texts that with the longer verdict exceed the model's context fail as ``too_long``)."""

    def __init__(self, model: Policy, verdicts: Sequence[str], batch_size: int):
        ids = [model.tokenizer(v, add_special_tokens=False)["input_ids"] for v in verdicts]
        empty = [v for v, i in zip(verdicts, ids) if not i]
        if empty:
            raise ConfigError(f"roles.judge.verdicts {list(verdicts)}: {empty} encode to no tokens")
        self.model, self.batch_size = model, batch_size
        self.verdict_ids, self.verdict_mask = pad_sequences(ids, model.pad_token_id, left=False)
        self.context = getattr(model.hf_model.config, "max_position_embeddings", None)

    @torch.no_grad()
    def __call__(self, texts: list[str], completions: list[str]) -> Scored:
        ids, mask = self.model.encode_prompts(texts)
        fits = torch.ones(len(texts), dtype=torch.bool)
        if self.context is not None:
            fits = mask.sum(1) + self.verdict_ids.shape[1] <= self.context
        gap = torch.full((len(texts),), math.nan)
        V = len(self.verdict_ids)
        for rows in fits.nonzero().squeeze(-1).split(self.batch_size):
            p_ids, p_mask = trim_left_padding(ids[rows], mask[rows])
            logp = self.model.forward_logp(p_ids.repeat_interleave(V, 0), p_mask.repeat_interleave(V, 0),
                                           self.verdict_ids.repeat(len(rows), 1),
                                           self.verdict_mask.repeat(len(rows), 1))["logp"]
            verdict = logp.sum(-1).reshape(len(rows), V)  # log p(yes), log p(no)
            gap[rows] = verdict[:, 0] - verdict[:, 1]
        reasons = [None if f else "too_long" for f in fits.tolist()]
        details = {} if bool(fits.all()) else {
            "too_long": f"a judge text of {int(mask.sum(1).max())} tokens plus the verdict exceeds the judge model's "
                        f"context of {self.context} positions"}
        return Scored(torch.sigmoid(gap), reasons, details)


class ClassifierScorer:
    """The classifier back end: the reward model's scalar score of (rendered template, completion); a pair
    longer than the model's positions fails as ``too_long``."""

    def __init__(self, reward_model: RewardModel, batch_size: int):
        self.reward_model, self.batch_size = reward_model, batch_size

    def __call__(self, texts: list[str], completions: list[str]) -> Scored:
        rm = self.reward_model
        lengths = [len(ids) for ids in rm.tokenizer(rm.texts(texts, completions))["input_ids"]] if texts else []
        fits = [rm.max_length is None or n <= rm.max_length for n in lengths]
        rows = [i for i, f in enumerate(fits) if f]
        scores = torch.full((len(texts),), math.nan)
        if rows:
            scores[rows] = rm.score([texts[i] for i in rows], [completions[i] for i in rows], self.batch_size)
        details = {} if all(fits) else {"too_long": f"a pair of {max(lengths)} tokens exceeds the reward model's "
                                                    f"max_position_embeddings={rm.max_length}"}
        return Scored(scores, [None if f else "too_long" for f in fits], details)


class EndpointScorer:
    """The http back end: each text is a prompt to the endpoint; its reply's score by ``parse_score``."""

    def __init__(self, client: EndpointClient, pattern: str, verdict_scores: dict[str, float],
                 score_range: tuple[float, float]):
        self.client, self.pattern = client, re.compile(pattern)
        self.verdict_scores, self.score_range = verdict_scores, score_range

    def __call__(self, texts: list[str], completions: list[str]) -> Scored:
        scores, reasons, details = [], [], {}
        for reply in self.client.complete(texts):
            if reply.text is None:
                score, reason, detail = math.nan, reply.failure, reply.detail
            else:
                score, reason = parse_score(reply.text, self.pattern, self.verdict_scores, self.score_range)
                detail = f"reply {reply.text[:120]!r} does not give a score by {self.pattern.pattern!r}"
            scores.append(score)
            reasons.append(reason)
            if reason is not None:
                details.setdefault(reason, detail)
        return Scored(torch.tensor(scores, dtype=torch.float32), reasons, details)


class Criterion(Settings):
    """One scored dimension of a multi-dimensional judge."""

    name: str = Field(min_length=1)
    """The criterion's name (its column of ``judge_scores``, in the order given)."""
    template: str | None = None
    """What the judge reads for this criterion (fields: {prompt}, {response}, {answer}, {rubric}); None: the back
    end's default template."""
    rule: str | None = None
    """backend rule: the task reward that scores this criterion (e.g. ``correct``, ``digit_match``)."""


@ROLES.register("judge")
class JudgeRole(Role):
    """A judge scoring completions (``judge_score``/``judge_scores`` inputs): a local reward model, a local
    causal LM's verdict probability, or an OpenAI-compatible endpoint (see the module docstring). It is never
    trained and holds nothing to checkpoint (rebuilt from its settings on resume)."""

    checkpointed = False

    backend: Literal["classifier", "causal", "http", "rule"] = "causal"
    """Where scores come from: a local sequence-classification model, a local causal LM, an HTTP endpoint, or the
    task's rewards named by ``rule`` (a rule judge, no model)."""
    path: str | None = None
    """Local save_pretrained folder of the classifier or causal model; causal without one: a frozen copy of the
    policy as training starts."""
    template: str | None = None
    """What the judge reads ({prompt}, {response}, {answer}, {rubric}); None: the back end's default."""
    rule: str | None = None
    """backend rule without criteria: the task reward that is the one criterion's score."""
    criteria: list[Criterion] = []
    """Named criteria with their own templates (or rules), one score column each; empty: one criterion,
    ``score``."""
    batch_size: int = Field(32, gt=0)
    """Texts per forward of a local model; prompts per request of the completions endpoint."""
    chat_template: bool = False
    """causal with ``path``: wrap the text as one user turn in the model's chat template (when it has one)."""
    verdicts: tuple[str, str] = (" Yes", " No")
    """causal: the (yes, no) verdict strings whose probabilities after the text give the score."""
    url: str | None = None
    """http: the OpenAI-compatible base URL, e.g. ``http://127.0.0.1:8000/v1``."""
    model: str | None = None
    """http: the model name the server serves."""
    endpoint: Literal["completions", "chat"] = "completions"
    """http: ``/v1/completions`` (batched prompts) or ``/v1/chat/completions`` (one user turn per request)."""
    api_key_env: str | None = None
    """http: the name of the environment variable holding the API key (never the key itself)."""
    concurrency: int = Field(4, gt=0)
    """http: requests in flight at once."""
    wait_s: float = Field(30.0, ge=0)
    """http: how long a run waits at its start, before any work, for the endpoint to answer (logging each try); then
    it refuses to start."""
    timeout_s: float = Field(30.0, gt=0)
    """http: socket timeout of one request, in seconds."""
    retries: int = Field(2, ge=0)
    """http: further tries of a request after a timeout, connection error or HTTP 408/429/5xx."""
    backoff_s: float = Field(0.5, ge=0)
    """http: the wait before retry k (0-based) is ``backoff_s · 2^k`` seconds."""
    max_tokens: int = Field(16, gt=0)
    """http: reply tokens."""
    temperature: float = Field(0.0, ge=0)
    """http: sampling temperature of the reply."""
    cache: bool = True
    """http: reuse the reply to a request already answered in this run."""
    cache_file: str | None = None
    """http: a JSON-lines file that keeps replies across runs (read at start, appended to)."""
    score_pattern: str = r"(?i)\b(yes|no|-?\d+(?:\.\d+)?)\b"
    """http: regex finding the score in the reply (its first group, if any): a verdict word or a number."""
    verdict_scores: list[tuple[str, float]] = [("yes", 1.0), ("no", 0.0)]
    """http: (verdict word, score in [0, 1]) pairs, e.g. ``[[CORRECT, 1], [PARTIAL, 0.5], [INCORRECT, 0]]``; words
    compare case-insensitively (quote yes and no in YAML, which reads them as booleans)."""
    score_range: tuple[float, float] = (0.0, 1.0)
    """http: the range of a numeric score, mapped onto [0, 1]; a number outside it is a failure."""

    @model_validator(mode="after")
    def _consistent(self) -> "JudgeRole":
        if self.backend == "classifier" and self.path is None:
            raise ValueError("backend 'classifier' needs path: a local sequence-classification model folder")
        if self.backend == "http" and (self.url is None or self.model is None):
            raise ValueError(f"backend 'http' needs url (e.g. http://127.0.0.1:8000/v1) and model (the served "
                             f"model's name); got url={self.url!r}, model={self.model!r}")
        rules = [r for _, r in self.named_rules()]
        if self.backend == "rule" and None in rules:
            raise ValueError(f"backend 'rule' needs a rule (a task reward, e.g. correct) for every criterion; "
                             f"got rules {rules}")
        if self.backend != "rule" and any(r is not None for r in rules):
            raise ValueError(f"rule {[r for r in rules if r is not None]} is read by backend 'rule' only, not "
                             f"{self.backend!r}")
        if self.url is not None and not re.match(r"https?://", self.url):
            raise ValueError(f"url {self.url!r} must start with http:// or https://")
        for name, template in self.named_templates():
            unknown = template_fields(template) - set(FIELDS)
            if unknown:
                raise ValueError(f"template of criterion {name!r} uses {sorted(unknown)}; a template may use "
                                 f"{{{'}, {'.join(FIELDS)}}}")
        names = [c.name for c in self.criteria]
        if len(set(names)) != len(names):
            raise ValueError(f"criteria names {names} repeat")
        if not self.verdicts[0] or not self.verdicts[1] or self.verdicts[0] == self.verdicts[1]:
            raise ValueError(f"verdicts {list(self.verdicts)} must be two different non-empty strings")
        try:
            re.compile(self.score_pattern)
        except re.error as err:
            raise ValueError(f"score_pattern {self.score_pattern!r} is no regex: {err}") from None
        if not self.score_range[0] < self.score_range[1]:
            raise ValueError(f"score_range {list(self.score_range)} must be (low, high) with low < high")
        return self

    def named_templates(self) -> list[tuple[str, str]]:
        """(name, template) of each criterion (the back end's default where a criterion gives none)."""
        default = TEMPLATES.get(self.backend, "")
        if self.criteria:
            return [(c.name, c.template if c.template is not None else default) for c in self.criteria]
        return [("score", self.template if self.template is not None else default)]

    def named_rules(self) -> list[tuple[str, str | None]]:
        """(name, rule) of each criterion."""
        if self.criteria:
            return [(c.name, c.rule) for c in self.criteria]
        return [("score", self.rule)]

    def preflight(self, log) -> None:
        """http: wait up to ``wait_s`` for the endpoint to answer (``EndpointClient.wait_until_up``)."""
        if self.backend == "http":
            self.client().wait_until_up(self.wait_s, log)

    def build(self, policy: Policy) -> Judge | RuleJudge:
        if self.backend == "rule":
            if self._resources.rule_scores is None:
                raise ConfigError("roles.judge backend 'rule' scores with the run task's rewards, which the trainer "
                                  "lends (RoleResources(rule_scores=...)); none was given")
            names, rules = zip(*self.named_rules())
            return RuleJudge(names, rules, self._resources.rule_scores)
        return Judge(self.named_templates(), self.scorer(policy))

    def scorer(self, policy: Policy):
        if self.backend == "causal":
            model = frozen_copy(policy) if self.path is None else frozen_load(self.path, policy, self.chat_template)
            return VerdictScorer(model, self.verdicts, self.batch_size)
        if self.backend == "classifier":
            return ClassifierScorer(RewardModel.load(self.path, device=str(policy.device)), self.batch_size)
        return EndpointScorer(self.client(), self.score_pattern, dict(self.verdict_scores), self.score_range)

    def client(self) -> EndpointClient:
        """The endpoint client with the key read from ``api_key_env``."""
        key = None
        if self.api_key_env is not None:
            key = os.environ.get(self.api_key_env)
            if not key:
                raise ConfigError(f"roles.judge.api_key_env={self.api_key_env!r}: that environment variable is not "
                                  f"set (export {self.api_key_env}=... with the endpoint's API key)")
        return EndpointClient(self.url, self.model, endpoint=self.endpoint, api_key=key,
                              concurrency=self.concurrency, timeout_s=self.timeout_s, retries=self.retries,
                              backoff_s=self.backoff_s, batch_size=self.batch_size, max_tokens=self.max_tokens,
                              temperature=self.temperature, cache=self.cache, cache_file=self.cache_file)
