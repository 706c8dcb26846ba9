"""The context check covers what roles, input providers, engines and prompt samplers render, not only the task's
prompts: a recipe whose role prompt exceeds the model's positions is refused in one line naming the key, before
the warm start; every shipped recipe passes it at its shipped settings."""
import random

import pytest

from polo.core.registry import ConfigError
from polo.tasks import build_task
from polo.train.config import RECIPES_DIR, load_recipe
from polo.train.context_check import check_builtin_context
from polo.train.trainer import Trainer, max_new_tokens

RECIPES = sorted(p.stem for p in RECIPES_DIR.glob("*.yaml"))
LONG = "x" * 60  # alone nearly the built-in model's 64 positions


def check(name: str, overrides=()) -> None:
    """What the trainer checks before the warm start, for recipe ``name`` at its settings."""
    recipe = load_recipe(name, list(overrides))
    task = build_task(recipe.task)
    pool = task.examples("train", recipe.train.train_pool, seed=recipe.seed)
    held_out = task.examples("test", recipe.train.eval_size, seed=recipe.seed)
    check_builtin_context(recipe, task, pool + held_out, pool, max_new_tokens(recipe, task))


def refusal(name: str, overrides) -> str:
    with pytest.raises(ConfigError) as err:
        check(name, overrides)
    message = str(err.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("name", RECIPES)
def test_shipped_recipe_fits_the_context(name):
    check(name)


def test_cort_rubric_prompt_over_the_context():
    message = refusal("cort", [f"credit.default_rubric={LONG}"])
    # "Grading criteria:\n" + 60 + "\n\n" + the longest prompt (6) + bos = 87, then 4 response tokens
    assert message.startswith("credit.cort: the rubric-conditioned prompt (credit.default_rubric + prompt in "
                              "credit.rubric_template) is 87 tokens + 4 response tokens, over the model's 64 positions "
                              "(model.tiny.max_position_embeddings): raise it or shorten the rubric"), message


@pytest.mark.parametrize("name, context, variant, tokens", [
    ("srpo", 64, "a correct sibling (roles.teacher.sibling_template)", 69),
    ("verpo_evidence", 100, "an incorrect sibling (roles.teacher.negative_template)", 96)])  # 77 fit, 104 do not
def test_teacher_prompt_over_the_context(name, context, variant, tokens):
    message = refusal(name, [f"model.tiny.max_position_embeddings={context}"])
    assert message.startswith(f"roles.teacher: the prompt with {variant} is {tokens} tokens + 4 tokens of the "
                              f"sibling's response + 4 response tokens, over the model's {context} positions"), message


def test_judge_template_over_the_context():
    message = refusal("grpo_judge", [f"roles.judge.template='{{prompt}}{{response}}{LONG}'"])
    # bos + 6 + 60, then 4 response tokens and the 4 of " Yes" / 3 of " No"
    assert message.startswith("roles.judge: the text of criterion 'score' (roles.judge.template) is 67 tokens + 4 "
                              "response tokens + 4 verdict tokens"), message


@pytest.mark.parametrize("name, overrides, start", [
    ("rgpo", [f"engine.template={LONG}{{guide}}{{prompt}}"],  # bos + 60 + a 3-digit answer + the longest prompt (6)
     "engine.guided: the hinted prompt (engine.template with the rationale) is 70 tokens + 4 response tokens"),
    # the teacher's request "{prompt}{answer}\nHint:" is 16 tokens, then the hint it writes
    ("grpo", ["engine={name: guided, source: teacher, hint_tokens: 60}"],
     "engine.guided: the teacher's hint request (engine.teacher_template) is 16 tokens + 60 hint tokens")])
def test_hinted_prompt_over_the_context(name, overrides, start):
    message = refusal(name, overrides)
    assert message.startswith(start), message


def test_paraphrase_over_the_context():
    """The longest rewording of the shipped pool (135 tokens) and 26 response tokens need 161 positions."""
    message = refusal("info_consistent_grpo", ["model.tiny.max_position_embeddings=160"])
    assert message.startswith("prompt_sampler.paraphrase_group: the longest rewording (the task's paraphrases) is "
                              "135 tokens + 26 response tokens, over the model's 160 positions"), message


def test_no_paraphrase_is_longer_than_the_longest():
    task = build_task({"name": "word_problems", "ops": 3, "distractors": 1})
    rng = random.Random(0)
    for example in task.examples("train", 50, seed=0):
        bound = len(task.longest_paraphrase(example).prompt)
        assert max(len(p.prompt) for p in task.paraphrases(example, 20, rng)) <= bound


def test_refused_before_the_warm_start(tiny, tmp_path, monkeypatch):
    def warm_start(*args):
        raise AssertionError("the warm start ran before the context check")

    monkeypatch.setattr("polo.train.trainer.ensure_warm_start", warm_start)
    with pytest.raises(ConfigError, match="^credit.cort: "):
        Trainer(load_recipe("cort", [*tiny, f"credit.default_rubric={LONG}"]), tmp_path)


def test_loaded_checkpoint_checks_role_prompts(tiny, tmp_path, chat_checkpoint):
    """With ``model.path`` the loaded model's positions bound the role prompts too."""
    path = chat_checkpoint(64)
    with pytest.raises(ConfigError, match=rf"^roles.teacher: .*max_position_embeddings in {path}/config.json"):
        Trainer(load_recipe("srpo", [*tiny, f"model.path={path}"]), tmp_path)
