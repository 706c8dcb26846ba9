"""A corpus of malformed configs, data files and arena files: each ends in a non-zero exit status and one
line on stderr that names the problem, with no traceback and no run folder created."""
import pytest

from polo.cli import main

RECIPE = {
    "yaml syntax": ("name: x\nadvantage: {name: grpo\n", "YAML syntax error"),
    "yaml tab": ("name: x\n\tseed: 1\n", "YAML syntax error"),
    "not a mapping": ("- a\n- b\n", "must be a YAML mapping"),
    "scalar": ("just text\n", "must be a YAML mapping"),
    "not utf-8": (b"name: \xff\xfe\n", "not UTF-8"),
    "unknown top key": ("name: x\nlearning_rate: 1\n", "unknown key 'learning_rate'"),
    "unknown section key": ("optim: {lrr: 0.1}\n", "unknown key 'optim.lrr'"),
    "section not a mapping": ("optim: 3\n", "optim"),
    "unknown advantage": ("advantage: {name: nope}\n", "unknown advantage 'nope'"),
    "component without name": ("advantage: {eps: 1}\n", "expected a mapping with a 'name' key"),
    "bad component field": ("policy_loss: {name: ppo_clip, clip: 0.2}\n", "policy_loss.clip"),
    "unknown engine": ("engine: {name: warp}\n", "unknown engine 'warp'"),
    "unknown role": ("roles: {oracle: {}}\n", "unknown role 'oracle'"),
    "role settings not a mapping": ("roles: {critic: 3}\n", "roles.critic"),
    "duplicate key": ("name: x\nseed: 1\nseed: 2\n", "line 3, column 1: duplicate key 'seed' (first given on line 2)"),
    "duplicate nested key": ("optim:\n  lr: 0.1\n  lr: 0.2\n", "duplicate key 'lr'"),
    "alias bomb": ("".join(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]\n" if i else "l0: &l0 [x, x, x, x, x, x, x, x, x]\n"
                           for i in range(9)), "expands to more than 100,000 YAML nodes"),
    "recursive alias": ("task: &t {name: addition, again: *t}\n", "recursive alias"),
    "file too large": ("description: '" + "x" * 1_100_000 + "'\n", "limited to 1,000,000 bytes"),
}

OVERRIDES = {
    "no equals sign": (["optim.lr"], "expected key.sub=value"),
    "inf lr": (["optim.lr=.inf"], "finite"),
    "negative lr": (["optim.lr=-1"], "optim.lr"),
    "nan kl": (["kl.coef=.nan"], "finite"),
    "nan entropy": (["entropy_coef=.nan"], "finite"),
    "betas out of range": (["optim.betas=[1.5, 0.9]"], "optim.betas"),
    "zero prompts": (["rollout.prompts_per_step=0"], "prompts_per_step"),
    "zero steps": (["train.steps=0"], "train.steps"),
    "string steps": (["train.steps=many"], "train.steps"),
    "top_p above 1": (["rollout.top_p=1.5"], "top_p"),
    "unknown schedule": (["optim.schedule=wavy"], "optim.schedule"),
    "heads do not divide": (["model.tiny.num_heads=3"], "num_heads=3"),
    "hidden size 0": (["model.tiny.hidden_size=0"], "hidden_size"),
    "negative lora rank": (["model.lora.r=-4"], "model.lora.r"),
    "unknown arch": (["model.tiny.arch=gpt9"], "model.tiny.arch"),
    "reward weight typo": (["rewards=[{name: correct, wieght: 1}]"], "expected keys 'name' and 'weight'"),
    "nan reward weight": (["rewards=[{name: correct, weight: .nan}]"], "must be finite"),
    "string reward weight": (["rewards=[{name: correct, weight: heavy}]"], "numeric weight"),
    "nan shaping weight": (["shaping=[{name: overlong, weight: .nan}]"], "finite"),
    "unknown credit": (["credit=nope"], "unknown credit 'nope'"),
    "unknown kl": (["kl.name=k9"], "unknown divergence 'k9'"),
    "unknown prompt sampler": (["prompt_sampler=nope"], "unknown prompt_sampler 'nope'"),
    "spo sampler with grpo": (["prompt_sampler=spo_priority"], "spo_priority needs an advantage"),
    "whole groups split": (["policy_loss={name: drpo}", "rollout.samples_per_prompt=4",
                            "train.micro_batch_size=3"], "would split groups"),
    "name escapes runs": (["name=../../escape"], "name"),
    "name with slash": (["name=a/b"], "name"),
    "unknown task": (["task={name: nope}"], "unknown task 'nope'"),
    "task without name": (["task={digits: 3}"], "task"),
    "bad task knob": (["task={name: addition, digitz: 3}"], "task.digitz"),
    "unknown reward": (["rewards=[{name: nope, weight: 1}]"], "unknown reward 'nope'"),
    "missing model path": (["model.path=/no/such/model"], "does not exist"),
    "override not yaml": (["task={name: [}"], "not valid YAML"),
    "boolean steps": (["train.steps=true"], "train.steps: expected a number, not the boolean true"),
    "boolean lr": (["optim.lr=false"], "optim.lr: expected a number"),
    "boolean tiny size": (["model.tiny.hidden_size=true"], "model.tiny.hidden_size"),
    "boolean component knob": (["policy_loss={name: ppo_clip, clip_low: true}"], "clip_low"),
    "kl target without a coefficient": (["kl.target=0.1"], "kl.target=0.1 adapts a KL coefficient, but kl.coef is 0"),
    "poise with groups of 4": (["advantage=poise_probe", "rollout.samples_per_prompt=4"],
                               "needs exactly 2 rollouts per prompt; rollout.samples_per_prompt is 4"),
    "scalar given a mapping": (["seed.x=1"], "seed"),
}

DATA = {
    "not utf-8": (b'{"prompt": "a", "answer": "\xff"}\n', "not UTF-8"),
    "invalid json": (b'{"prompt": "a", "answer": }\n', "invalid JSON"),
    "no rows": (b"", "has no rows"),
    "blank rows only": (b"\n\n  \n", "has no rows"),
    "missing answer": (b'{"prompt": "a"}\n', "answer"),
    "missing prompt": (b'{"answer": "a"}\n', "prompt"),
    "row not an object": (b'["a", "b"]\n', ":1"),
    "reserved column": (b'{"prompt": "a", "answer": "b", "completions": 1}\n', "reserved"),
    "columns differ": (b'{"prompt": "a", "answer": "b"}\n{"prompt": "c", "answer": "d", "x": 1}\n', ":2"),
    "row too large": (b'{"prompt": "' + b"a" * 1_100_000 + b'", "answer": "b"}\n', "limited to"),
    "answers beyond the context": (b"".join(b'{"prompt": "q%d", "answer": "%s"}\n' % (i, b"7" * 2000) for i in range(9)),
                                   "+ 2001 new tokens"),
    "prompts beyond the context": (b"".join(b'{"prompt": "%s%d", "answer": "1"}\n' % (b"p" * 100, i) for i in range(9)),
                                   "the longest prompt (training and held-out examples) is 102 tokens"),
}

HEAD = "name: a\nseeds: [0]\nbudget: {steps: 1}\n"
ARENA = {
    "yaml syntax": ("name: [\n", "YAML syntax error"),
    "not a mapping": ("- grpo\n", "must be a YAML mapping"),
    "no budget": ("name: a\nseeds: [0]\nentries: [{recipe: grpo}]\n", "budget"),
    "no entries": (HEAD, "entries"),
    "unknown key": (HEAD + "entries: [{recipe: grpo}]\nworkerz: 2\n", "workerz"),
    "unknown recipe": (HEAD + "entries: [{recipe: nope}]\n", "nope"),
    "repeated labels": (HEAD + "entries: [{recipe: grpo}, {recipe: grpo}]\n", "labels repeat"),
    "bad override in entry": (HEAD + "entries: [{recipe: grpo, overrides: [optim.lr=.inf]}]\n", "finite"),
    "duplicate key": (HEAD + "entries: [{recipe: grpo}]\nseeds: [1]\n", "duplicate key 'seeds'"),
}


def check_one_line_failure(argv, expected, capsys, tmp_path):
    code = main(argv)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code != 0
    assert lines and lines[-1].startswith("error: "), err  # after any warning the data gave on its way
    assert sum(line.startswith("error: ") for line in lines) == 1, err
    assert "Traceback" not in err and expected in lines[-1], lines[-1]
    assert not (tmp_path / "runs").exists()


@pytest.fixture(autouse=True)
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


@pytest.mark.parametrize("case", sorted(RECIPE))
def test_malformed_recipe_file(case, tmp_path, capsys):
    text, expected = RECIPE[case]
    path = tmp_path / "recipe.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    check_one_line_failure(["train", str(path)], expected, capsys, tmp_path)


@pytest.mark.parametrize("case", sorted(OVERRIDES))
def test_malformed_override(case, tiny, tmp_path, capsys):
    overrides, expected = OVERRIDES[case]
    check_one_line_failure(["train", "grpo", *tiny, *overrides], expected, capsys, tmp_path)


@pytest.mark.parametrize("case", sorted(DATA))
def test_malformed_data_file(case, tiny, tmp_path, capsys):
    data, expected = DATA[case]
    path = tmp_path / "data.jsonl"
    path.write_bytes(data)
    check_one_line_failure(["train", "grpo", *tiny, f"task={{name: jsonl, path: {path}}}"], expected, capsys,
                           tmp_path)


@pytest.mark.parametrize("case", sorted(ARENA))
def test_malformed_arena_file(case, tmp_path, capsys):
    text, expected = ARENA[case]
    path = tmp_path / "arena.yaml"
    path.write_text(text)
    check_one_line_failure(["arena", str(path), "--report-only"], expected, capsys, tmp_path)


@pytest.mark.parametrize("argv, expected", [
    (["--plugin", "/no/such/plugin.py", "train", "grpo"], "plugin file not found"),
    (["eval", "/no/such/run"], "not a run folder"),
    (["train", "--resume", "/no/such/run"], "config.yaml is missing"),
])
def test_missing_files_and_folders(argv, expected, tmp_path, capsys):
    check_one_line_failure(argv, expected, capsys, tmp_path)


@pytest.mark.parametrize("config", ["garbage{", "{}", '{"model_type": "llama"}'])
def test_corrupt_model_folder(config, tiny, tmp_path, capsys):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text(config)
    check_one_line_failure(["train", "grpo", *tiny, f"model.path={tmp_path / 'model'}"], "cannot be loaded", capsys,
                           tmp_path)


def test_corpus_size():
    assert len(RECIPE) + len(OVERRIDES) + len(DATA) + len(ARENA) + 3 >= 60


def test_a_reward_that_exits_zero_fails_the_run(tiny, tmp_path, capsys):
    """A plugin reward calling ``sys.exit(0)`` must not end ``polo train`` with status 0 (an arena would count
    the run as done)."""
    plugin = tmp_path / "exiting_reward.py"
    plugin.write_text("import sys\nfrom polo.tasks import register_reward\n\n"
                      "@register_reward('test_exits_zero')\ndef exits(prompts, completions, **kwargs):\n"
                      "    sys.exit(0)\n")
    code = main(["--plugin", str(plugin), "train", "grpo", *tiny, "rewards=[{name: test_exits_zero}]",
                 "--run-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err
    assert "error: reward 'test_exits_zero' (exits) called sys.exit(0)" in err
