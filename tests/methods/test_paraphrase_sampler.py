"""Paraphrase groups: K rewordings of one problem form a group; word_problems' rewordings keep the problem."""
import random
import re
from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch
from pydantic import ValidationError

from polo.core.batch import RolloutBatch
from polo.core.registry import ConfigError
from polo.engines.base import Rollouts
from polo.methods.info_consistency.paraphrase_group import ParaphraseGroup
from polo.tasks import build_task
from polo.tasks.word_problem_paraphrases import SENTENCE_END, sentence_wordings, word_problem_paraphrases
from polo.train.config import load_recipe
from polo.train.data import PromptStream
from polo.train.trainer import Trainer, resume

TASK = build_task({"name": "word_problems", "ops": 2, "distractors": 1})


def fake_generate(G):
    """generate(examples, indices): ``G`` rows per example, grouped per example as the engines do."""
    asked = []

    def generate(examples, indices):
        asked.append(list(examples))
        B = len(examples) * G
        batch = RolloutBatch(prompt_ids=torch.ones(B, 2, dtype=torch.long), prompt_mask=torch.ones(B, 2),
                             response_ids=torch.ones(B, 3, dtype=torch.long), response_mask=torch.ones(B, 3),
                             group=torch.arange(len(examples)).repeat_interleave(G), rewards=torch.zeros(B, 1),
                             old_logp=torch.zeros(B, 3),
                             extras={"prompt_index": torch.tensor(indices).repeat_interleave(G)})
        return Rollouts(batch, ["x"] * B, [e for e in examples for _ in range(G)])

    return generate, asked


def collect(sampler, task=TASK, n=3, G=1, seed=0, pool=None):
    pool = pool or task.examples("train", 10, seed=0)
    generate, asked = fake_generate(G)
    components = {"engine": SimpleNamespace(settings=SimpleNamespace(task=task))}
    got, metrics = sampler.collect(PromptStream(pool, seed=0), generate, n, torch.Generator().manual_seed(seed),
                                   components)
    return got, asked[0], metrics, pool


def test_a_group_is_the_original_and_its_rewordings():
    got, asked, metrics, pool = collect(ParaphraseGroup(k=4), n=3)
    assert torch.equal(got.batch.group, torch.arange(3).repeat_interleave(4))
    index = got.batch.extras["prompt_index"].view(3, 4)
    assert (index == index[:, :1]).all()  # every row keeps its problem's pool index
    for g in range(3):
        group = asked[4 * g: 4 * g + 4]
        assert group[0] == pool[int(index[g, 0])]  # the task's own wording first
        assert len({e.prompt for e in group}) == 4 and {e.answer for e in group} == {group[0].answer}
    assert metrics["sampler/distinct_prompts_frac"] == 1.0


def test_several_samples_per_paraphrase_and_rewordings_only():
    got, asked, _, pool = collect(ParaphraseGroup(k=3, include_original=False), n=2, G=2)
    assert torch.equal(got.batch.group, torch.arange(2).repeat_interleave(6))
    assert not {e.prompt for e in asked} & {e.prompt for e in pool}


def test_a_group_of_one_is_the_original_prompt():
    got, asked, _, pool = collect(ParaphraseGroup(k=1), n=3)
    assert torch.equal(got.batch.group, torch.arange(3)) and all(e in pool for e in asked)


def test_the_step_generator_fixes_the_wordings_so_a_resumed_run_draws_the_same():
    prompts = [[e.prompt for e in collect(ParaphraseGroup(k=4), seed=s)[1]] for s in (0, 0, 1)]
    assert prompts[0] == prompts[1] and prompts[0] != prompts[2]
    assert ParaphraseGroup().state_dict() == {}


def test_a_task_without_paraphrases_or_with_wrong_ones_is_refused():
    addition = build_task({"name": "addition"})
    with pytest.raises(ConfigError, match="'addition' has none"):
        collect(ParaphraseGroup(), task=addition)
    wrong = SimpleNamespace(name="broken", paraphrases=lambda e, k, rng: [replace(e, answer="-1")] * k)
    with pytest.raises(ValueError, match="broken"):
        collect(ParaphraseGroup(k=3), task=wrong, pool=TASK.examples("train", 4, seed=0))
    with pytest.raises(ValidationError, match="k"):
        ParaphraseGroup(k=0)


def test_word_problem_rewordings_keep_the_numbers_in_order_and_cover_every_sentence_form():
    task = build_task({"name": "word_problems", "ops": 5, "distractors": 3, "max_value": 99})
    rng = random.Random(0)
    for example in task.examples("train", 200, seed=1):
        for sentence in SENTENCE_END.split(example.prompt.rstrip("\n")):
            assert len(sentence_wordings(sentence)) > 1, sentence  # no sentence form is left unworded
        numbers = re.findall(r"\d+", example.prompt)
        for variant in word_problem_paraphrases(example, 3, rng):
            assert re.findall(r"\d+", variant.prompt) == numbers and variant.prompt.endswith("?\n")
            assert variant.answer == example.answer and variant.columns == example.columns
            assert variant.prompt != example.prompt
    assert task.paraphrases(example, 0, rng) == []
    with pytest.raises(ValueError, match="k must be"):
        word_problem_paraphrases(example, -1, rng)


def _deterministic(rows):
    return [{k: v for k, v in r.items() if not k.startswith(("time/", "perf/", "elapsed"))} for r in rows]


def test_the_recipe_trains_on_paraphrase_groups_and_resumes_bit_for_bit(tiny, tmp_path):
    every = ["train.save_every=2", "train.eval_every=2", "prompt_sampler.k=4", "optim.schedule=constant"]  # lr independent of train.steps
    full = Trainer(load_recipe("info_consistent_grpo", [*tiny, *every, "train.steps=4"]), tmp_path / "full",
                   log=lambda *_: None).run()
    assert [r["step"] for r in full] == [0, 1, 2, 3, 4]
    assert all(0 <= r["reward/info_consistency"] <= 1 and r["sampler/distinct_prompts_frac"] == 1 for r in full[1:])
    Trainer(load_recipe("info_consistent_grpo", [*tiny, *every, "train.steps=2"]), tmp_path / "cut",
            log=lambda *_: None).run()
    resumed = resume(tmp_path / "cut", log=lambda *_: None, overrides=["train.steps=4"])
    resumed.run()
    assert _deterministic(full) == _deterministic(resumed.metrics.read())
