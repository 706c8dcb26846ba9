"""Every reward of a run test-called before the warm start, so a broken reward fails in seconds, not after minutes
of supervised training."""
from __future__ import annotations

from collections.abc import Sequence

from polo.policy.policy import load_tokenizer
from polo.policy.tokenizer import build_char_tokenizer
from polo.tasks.base import Example, Task
from polo.tasks.reward_calls import RewardContext, TrainerState
from polo.tasks.rewards import RewardSpec, score_batch

PROBE_SIZE = 2


def probe_rewards(task: Task, specs: Sequence[RewardSpec], examples: Sequence[Example], model_path: str | None,
                  max_steps: int) -> None:
    """Score the first ``PROBE_SIZE`` examples' demonstrations with every reward (their token ids from the run's
    tokenizer: the built-in one, or ``model_path``'s), as training will; a RewardError or ConfigError names the
    failing reward. What the rewards log here is discarded. Nothing to do without reward functions (an
    environment's episodes are scored by the environment)."""
    if not specs:
        return
    sample = list(examples[:PROBE_SIZE])
    demos = [task.demonstration(e) for e in sample]
    tokenizer = build_char_tokenizer() if model_path is None else load_tokenizer(model_path)
    stop = [] if tokenizer.eos_token_id is None else [tokenizer.eos_token_id]
    ids = [seq + stop for seq in tokenizer(demos, add_special_tokens=False)["input_ids"]]
    score_batch(task, specs, sample, demos, ids, RewardContext(TrainerState(0, max_steps)))
