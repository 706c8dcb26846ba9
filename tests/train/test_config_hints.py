"""Overrides into sections a recipe does not set, and did-you-mean answers for unknown keys and names."""
import pytest

from polo.cli import main
from polo.core.registry import ConfigError
from polo.tasks import build_task
from polo.train.config import Recipe, load_recipe


def test_a_task_knob_alone_starts_from_the_default_task():
    assert load_recipe("grpo", ["task.digits=3"]).task == {"name": "addition", "digits": 3}
    assert Recipe.model_fields["task"].default == {"name": "addition"}  # the default itself is untouched


def test_a_component_knob_on_a_recipe_without_the_component(tmp_path):
    path = tmp_path / "bare.yaml"
    path.write_text("name: bare\n")
    assert load_recipe(path, ["advantage.eps=0.1"]).advantage == {"name": "grpo", "eps": 0.1}
    assert load_recipe(path, ["kl.coef=0.1"]).kl.coef == 0.1


def test_unknown_section_key_names_the_closest_and_the_valid_keys():
    with pytest.raises(ConfigError) as err:
        load_recipe("grpo", ["rollout.prompts_per_steps=4"])
    assert ("unknown key 'rollout.prompts_per_steps' (did you mean rollout.prompts_per_step? valid keys in rollout: "
            "prompts_per_step, samples_per_prompt,") in str(err.value)


def test_unknown_keys_without_a_close_match_still_list_the_valid_ones():
    with pytest.raises(ConfigError, match=r"unknown key 'optim.zzz' \(valid keys in optim: lr, betas,") as err:
        load_recipe("grpo", ["optim.zzz=1"])
    assert "did you mean" not in str(err.value)
    with pytest.raises(ConfigError, match=r"unknown key 'sed' \(did you mean seed\? valid keys at the top level: name"):
        load_recipe("grpo", ["sed=1"])
    with pytest.raises(ConfigError, match=r"did you mean model.tiny.hidden_size\? valid keys in model.tiny: preset, arch"):
        load_recipe("grpo", ["model.tiny.hiden_size=64"])


def test_unknown_component_name_and_knob_get_a_suggestion():
    with pytest.raises(ConfigError, match=r"unknown advantage 'grpp'; did you mean grpo\? valid advantage names: "):
        load_recipe("grpo", ["advantage.name=grpp"])
    with pytest.raises(ConfigError, match=r"unknown key 'policy_loss.clip_hgih' \(did you mean policy_loss.clip_high\? "
                                          r"valid keys in policy_loss ppo_clip: clip_low, clip_high, dual_clip\)"):
        load_recipe("grpo", ["policy_loss.clip_hgih=0.3"])
    with pytest.raises(ConfigError, match=r"unknown key 'advantage.eps' \(advantage dr_grpo takes no keys\)"):
        load_recipe("dr_grpo", ["advantage.eps=0.1"])
    with pytest.raises(ConfigError, match=r"unknown key 'task.digitz' \(did you mean task.digits\?"):
        build_task({"name": "addition", "digitz": 3})


def test_polo_train_answers_a_typo_in_one_line(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["train", "grpo", "rollout.prompts_per_steps=4"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: invalid recipe: unknown key 'rollout.prompts_per_steps' (did you mean "
                          "rollout.prompts_per_step?") and "\n" not in err
    assert not (tmp_path / "runs").exists()
