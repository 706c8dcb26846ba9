"""INSPO's proposers: new instruction candidates from the replay buffer of (instruction, question, trajectory,
reward), failures first.

``mutate`` is the deterministic template mutator that stands in for the paper's optimizer LLM on the CPU
library. It reads the buffer as experience about the grammar's fragments: a fragment's *blame* is the
failure rate of the replayed episodes whose instruction held it, smoothed towards the buffer's overall
failure rate by one pseudo-episode (an unseen fragment gets the overall rate). Each candidate starts from
a parent (the population's best-scored instructions in turn) and swaps its most-blamed fragment for the
least-blamed fragment it lacks; when that instruction exists already, it adds that fragment, then drops
the most-blamed one, then swaps two random fragments (the generator's draw).

``ModelProposer`` prompts a causal LM with the failure transcripts and the current best instruction and
takes its reply (lowercased, letters, digits and spaces, at most ``max_chars``) as the candidate: a local
checkpoint sampled with the trainer's generator (the prompt cut from the left to fit its context), or an
OpenAI-compatible endpoint (``polo.roles.http_judge.EndpointClient``). An empty or repeated reply proposes
nothing and is counted in ``failures``.
"""
from __future__ import annotations

import re
from collections.abc import Sequence

import torch

from polo.roles.http_judge import EndpointClient
from polo.engines.replies import sample_replies

UNSAFE = re.compile(r"[^a-z0-9 ]+")


def failures_first(replay: Sequence[dict]) -> list[dict]:
    """The buffer's entries, failed episodes (reward ≤ 0) first, the newest first within each."""
    newest = list(reversed(replay))
    return [e for e in newest if e["reward"] <= 0] + [e for e in newest if e["reward"] > 0]


def blame(replay: Sequence[dict], fragments: Sequence[str]) -> dict[str, float]:
    """Per fragment: ``(failures + f̄) / (episodes + 1)`` over the replayed episodes whose instruction holds it,
    ``f̄`` the buffer's failure rate (0.5 for an empty buffer)."""
    overall = sum(e["reward"] <= 0 for e in replay) / len(replay) if replay else 0.5
    out = {}
    for word in fragments:
        used = [e for e in replay if word in e["instruction"].split()]
        out[word] = (sum(e["reward"] <= 0 for e in used) + overall) / (len(used) + 1)
    return out


def mutate(population: Sequence[str], scores: Sequence[float], replay: Sequence[dict], fragments: Sequence[str],
           k: int, generator: torch.Generator) -> list[str]:
    """Up to ``k`` new instructions (not in ``population``, distinct), see the module docstring."""
    rate = blame(replay, fragments)
    order = {w: i for i, w in enumerate(fragments)}
    compose = lambda words: " ".join(sorted(set(words), key=order.__getitem__))  # noqa: E731
    parents = [population[i] for i in sorted(range(len(population)), key=lambda i: -scores[i])]
    taken, out = set(population), []
    for i in range(k * len(parents)):
        if len(out) == k:
            break
        words = [w for w in parents[i % len(parents)].split() if w in order]
        absent = sorted((w for w in fragments if w not in words), key=lambda w: (rate[w], order[w]))
        worst = max(words, key=lambda w: (rate[w], order[w])) if words else None
        tries = []
        if absent and worst is not None:
            tries.append([w for w in words if w != worst] + absent[:1])
        if absent:
            tries.append(words + absent[:1])
        if worst is not None and len(words) > 1:
            tries.append([w for w in words if w != worst])
        if words and absent:
            drop = words[int(torch.randint(len(words), (1,), generator=generator))]
            add = absent[int(torch.randint(len(absent), (1,), generator=generator))]
            tries.append([w for w in words if w != drop] + [add])
        for words_ in tries:
            text = compose(words_)
            if text and text not in taken:
                taken.add(text)
                out.append(text)
                break
    return out


def clean(text: str, max_chars: int) -> str:
    """A reply as an instruction: lowercase, runs of other characters made one space, at most ``max_chars``."""
    return " ".join(UNSAFE.sub(" ", text.lower()).split())[:max_chars].strip()


def proposal_prompt(replay: Sequence[dict], best: str, shown: int = 3) -> str:
    """What the optimizer model reads: up to ``shown`` failed transcripts, the best instruction, then the cue."""
    failed = [e for e in failures_first(replay) if e["reward"] <= 0][:shown]
    lines = [f"failed with '{e['instruction']}': {e['transcript']}" for e in failed]
    return "\n".join([*lines, f"best so far: {best}", "a better instruction:"])


class ModelProposer:
    """Candidates written by a causal LM: ``policy`` (a loaded local checkpoint) or ``client`` (an endpoint)."""

    def __init__(self, max_chars: int, policy=None, client: EndpointClient | None = None):
        if (policy is None) == (client is None):
            raise ValueError("ModelProposer needs exactly one of a local policy or an endpoint client")
        self.max_chars, self.policy, self.client = max_chars, policy, client
        self.failures = 0

    def __call__(self, population: Sequence[str], scores: Sequence[float], replay: Sequence[dict], k: int,
                 generator: torch.Generator) -> list[str]:
        best = population[max(range(len(population)), key=lambda i: scores[i])] if population else ""
        prompts = [proposal_prompt(replay, best)] * k
        replies = (sample_replies(self.policy, prompts, self.max_chars, generator) if self.policy is not None
                   else [r.text for r in self.client.complete(prompts)])
        out, taken = [], set(population)
        for reply in replies:
            text = clean(reply, self.max_chars) if reply is not None else ""
            if not text or text in taken:
                self.failures += 1
                continue
            taken.add(text)
            out.append(text)
        return out

