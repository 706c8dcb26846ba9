"""A run builds every component, role and its input plan once: config validation, the run's config.yaml and the
trainer share one ``Run`` (polo.train.run.build_run)."""
from collections import Counter

import polo.train.run as run_module
from polo.core.registry import DIVERGENCES, REGULARIZERS, SHAPING, Registry
from polo.roles.base import ROLES
from polo.train.config import load_recipe, resolved_tree
from polo.train.run import STAGES
from polo.train.trainer import Trainer

RUN_KINDS = {registry.kind for registry in [*STAGES.values(), SHAPING, REGULARIZERS, DIVERGENCES, ROLES]}


def counting(monkeypatch) -> Counter:
    """Count each ``Registry.build`` of a run's component or role by (kind, name), and each input plan."""
    built: Counter = Counter()
    build, plan = Registry.build, run_module.plan_inputs

    def counted_build(self, config, key=None):
        component = build(self, config, key)
        if self.kind in RUN_KINDS:
            built[self.kind, component.registry_name] += 1
        return component

    def counted_plan(recipe, components):
        built["input plan"] += 1
        return plan(recipe, components)

    monkeypatch.setattr(Registry, "build", counted_build)
    monkeypatch.setattr(run_module, "plan_inputs", counted_plan)
    return built


def test_one_training_run_builds_each_component_role_and_plan_once(tiny, tmp_path, monkeypatch):
    built = counting(monkeypatch)
    recipe = load_recipe("ppo", [*tiny, "train.steps=2", "train.eval_every=2", "train.save_every=2", "kl.coef=0.01",
                                 "shaping=[{name: overlong}]"])
    trainer = Trainer(recipe, tmp_path / "run", log=lambda *_: None)
    trainer.run()
    assert {("role", "critic"), ("role", "reference"), ("shaping", "overlong"), ("engine", "single_turn"),
            ("divergence", "k3"), "input plan"} <= set(built)
    assert set(built.values()) == {1}, built
    assert (tmp_path / "run" / "config.yaml").is_file()


def test_a_second_trainer_of_one_recipe_builds_its_own_run(tiny, tmp_path):
    recipe = load_recipe("grpo", [*tiny, "train.steps=1"])
    first = Trainer(recipe, tmp_path / "a", log=lambda *_: None)
    second = Trainer(recipe, tmp_path / "b", log=lambda *_: None)
    assert first.built is not second.built and first.components["advantage"] is not second.components["advantage"]
    assert first.config_tree == second.config_tree == resolved_tree(recipe)


def test_a_copied_recipe_resolves_its_own_settings():
    recipe = load_recipe("grpo")
    copy = recipe.model_copy(update={"entropy_coef": 0.5})
    assert resolved_tree(copy)["entropy_coef"] == 0.5 and resolved_tree(recipe)["entropy_coef"] == 0.0
    assert copy.built() is not recipe.built() and recipe.built() is recipe.built()
