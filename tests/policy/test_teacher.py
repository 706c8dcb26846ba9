"""The teacher role: its five sources, the EMA update, checkpointing, vocabulary checks and settings."""
import io
from functools import partial
from types import SimpleNamespace

import pytest
import torch
from rich.console import Console

from polo.core.registry import ConfigError
from polo.policy import Policy, TinyModelConfig
from polo.roles.base import ROLES, RoleResources
from polo.roles.teacher import Teacher, TeacherModel, check_vocabulary
from polo.policy.policy import build_tiny_policy
from polo.tasks.registry import build_task
from polo.train.config import load_recipe
from polo.train import warm_start
from polo.train.warm_start import warm_start_with

SMALL = TinyModelConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64)


@pytest.fixture
def policy():
    torch.manual_seed(0)
    return build_tiny_policy(SMALL)


def teacher(**settings):
    return ROLES.build({"name": "teacher", **settings})


def test_initial_is_a_frozen_copy_rebuilt_on_resume(policy):
    role = teacher()
    model = role.build(policy)
    assert isinstance(model, TeacherModel) and isinstance(model, Policy) and model.settings is role
    assert model.model is not policy.model
    for t, s in zip(model.parameters(), policy.parameters()):
        assert torch.equal(t, s) and not t.requires_grad
    assert not role.checkpointed and not model.training


def test_ema_moves_toward_the_policy_after_each_update(policy):
    role = teacher(source="ema", ema_rate=0.25)
    model = role.build(policy)
    before = [p.clone() for p in model.parameters()]
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(1.0)
    role.on_update(model, policy, step=1)
    for old, new, live in zip(before, model.parameters(), policy.parameters()):
        torch.testing.assert_close(new, 0.75 * old + 0.25 * live)  # θ_T ← (1 − λ) θ_T + λ θ
    assert role.checkpointed and teacher(source="initial").checkpointed is False


def test_policy_source_is_the_live_policy_without_a_copy(policy):
    role = teacher(source="policy")
    model = role.build(policy)
    assert model.model is policy.model and not role.checkpointed  # the same weights, re-prompted
    with torch.no_grad():
        next(policy.parameters()).add_(1.0)
    assert torch.equal(next(model.parameters()), next(policy.parameters()))
    role.on_update(model, policy, 1)


def test_path_source_loads_a_folder_with_the_students_vocabulary(policy, tmp_path):
    policy.save(tmp_path / "teacher")
    model = teacher(source="path", path=str(tmp_path / "teacher")).build(policy)
    assert not any(p.requires_grad for p in model.parameters())
    for t, s in zip(model.parameters(), policy.parameters()):
        assert torch.equal(t, s)


def test_vocabulary_mismatch_names_both_sizes(policy, chat_checkpoint):
    with pytest.raises(ConfigError, match=r"teacher's vocabulary has \d+ entries, the student's 100"):
        teacher(source="path", path=str(chat_checkpoint())).build(policy)
    same_size = SimpleNamespace(hf_model=policy.hf_model,
                                tokenizer=SimpleNamespace(get_vocab=lambda: {"a": 0}))
    with pytest.raises(ConfigError, match="other ids"):
        check_vocabulary(same_size, policy, "roles.teacher")


def test_warm_start_source_trains_the_built_in_model_longer(policy, tiny):
    recipe = load_recipe("gkd", tiny)
    task = build_task(recipe.task)
    settings = {"steps": 30, "examples": 100, "target_accuracy": None}
    role = teacher(source="warm_start", warm_start=settings)
    assert role.warm_start.check_every == 100  # the settings not given keep the teacher's defaults
    with pytest.raises(ConfigError, match="needs the run's warm start"):
        role.build(policy)
    role.bind(RoleResources(warm_start=partial(warm_start_with, recipe, task, lambda *_: None)))
    model = role.build(policy)
    assert not role.checkpointed and not any(p.requires_grad for p in model.parameters())
    assert any(not torch.equal(t, s) for t, s in zip(model.parameters(), policy.parameters()))
    again = teacher(source="warm_start", warm_start=settings)
    again.bind(RoleResources(warm_start=partial(warm_start_with, recipe, task, lambda *_: None)))
    for a, b in zip(again.build(policy).parameters(), model.parameters()):
        assert torch.equal(a, b)  # cached: rebuilt identically on resume


def test_a_teacher_warm_start_says_what_it_trains_with_a_progress_bar_on_a_terminal(policy, tiny, tmp_path,
                                                                                     monkeypatch):
    screen = io.StringIO()
    monkeypatch.setenv("POLO_CACHE", str(tmp_path))  # built here, not found cached
    monkeypatch.setattr(warm_start, "Console", lambda **_: Console(file=screen, force_terminal=True, width=120))
    recipe, lines = load_recipe("gkd", tiny), []
    role = teacher(source="warm_start", warm_start={"steps": 30, "examples": 100, "target_accuracy": None})
    role.bind(RoleResources(warm_start=partial(warm_start_with, recipe, build_task(recipe.task), lines.append)))
    role.build(policy)
    assert lines[0].startswith("teacher warm start: training the built-in model") and "up to 30 steps" in lines[0]
    assert "teacher warm start" in screen.getvalue() and "30/30" in screen.getvalue()


@pytest.mark.parametrize("settings, message", [
    ({"source": "path"}, "needs a checkpoint folder"),
    ({"source": "initial", "path": "x"}, "only read by source 'path'"),
    ({"sibling_template": "{prompt} only"}, "lacks the field"),
    ({"negative_template": "{prompt} {solution} {answer}"}, "may use only"),
    ({"top_k": -1}, "top_k"),
    ({"ema_rate": 0.0}, "ema_rate"),
    ({"warm_start": {"steps": -1}}, "warm_start.steps"),
    ({"warm_start": {"lr": 0.1}}, "warm_start"),
    ({"source": "remote"}, "source"),
])
def test_bad_settings_are_config_errors(settings, message):
    with pytest.raises(ConfigError, match=message):
        teacher(**settings)


def test_registered():
    assert ROLES.get("teacher") is Teacher
