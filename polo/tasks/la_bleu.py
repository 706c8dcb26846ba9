"""Length-aware BLEU: BLEU for short answers, whose n-gram order is capped by the lengths compared.

Tokens are the lower-cased whitespace-split words. With ``n_max = min(4, |hyp|, |ref|)`` and ``p_n`` the
clipped n-gram precision (hypothesis n-grams, each counted at most as often as in the reference, over the
hypothesis' n-gram count), ``LA-BLEU = BP · exp((1/n_max) Σ_{n ≤ n_max} log p_n)``, 0 when some ``p_n`` is 0 or
either side is empty; the brevity penalty is ``BP = 1`` if ``|hyp| ≥ |ref|`` else ``exp(1 − |ref|/|hyp|)``.
Capping the order keeps a one- or two-word answer from scoring 0 for lack of 3- and 4-grams, which plain
BLEU-4 would give it. Used by PRS (Value-based Sampling Policy Optimization and Progressive Reward Shaping,
arXiv:2512.07478) as the quality of short-form answers.
"""
from __future__ import annotations

import math
from collections import Counter


def ngrams(tokens: list[str], n: int) -> Counter:
    return Counter(tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1))


def la_bleu(hypothesis: str, reference: str) -> float:
    """LA-BLEU of ``hypothesis`` against ``reference`` (see the module docstring), in [0, 1]."""
    hyp, ref = hypothesis.lower().split(), reference.lower().split()
    n_max = min(4, len(hyp), len(ref))
    if n_max == 0:
        return 0.0
    log_p = 0.0
    for n in range(1, n_max + 1):
        h, r = ngrams(hyp, n), ngrams(ref, n)
        matched = sum(min(count, r[gram]) for gram, count in h.items())
        if matched == 0:
            return 0.0
        log_p += math.log(matched / sum(h.values()))
    brevity = 1.0 if len(hyp) >= len(ref) else math.exp(1 - len(ref) / len(hyp))
    return brevity * math.exp(log_p / n_max)
