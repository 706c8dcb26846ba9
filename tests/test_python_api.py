"""The Python API: docs/python_api.md's example runs as written (shrunk by the tiny overrides) and the public
names resolve lazily."""
import re
import subprocess
import sys
from pathlib import Path

import yaml

import polo
from polo.train.metrics import read_metrics

DOC = Path(__file__).resolve().parent.parent / "docs" / "python_api.md"


def example_code() -> str:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert len(blocks) == 1, "docs/python_api.md should hold exactly one runnable example"
    return blocks[0]


def test_the_documented_example_runs(tiny, tmp_path, monkeypatch, capsys):
    load = polo.load_recipe
    monkeypatch.setattr(polo, "load_recipe", lambda name, overrides=(): load(name, [*overrides, *tiny]))
    monkeypatch.chdir(tmp_path)
    exec(compile(example_code(), str(DOC), "exec"), {"__name__": "python_api_example"})
    out = capsys.readouterr().out
    steps = [int(s) for s in re.findall(r"^step (\d+): reward [0-9.]+ on 32 samples$", out, flags=re.M)]
    assert steps == [1, 2, 3]  # on_step_end once per step (tiny: 3 steps of 4 prompts x grpo's 8 samples)
    assert re.search(r"^greedy [0-9.]+ -> [0-9.]+, sampled [0-9.]+ -> [0-9.]+$", out, flags=re.M)
    run = tmp_path / "runs" / "python_api_example"
    config = yaml.safe_load((run / "config.yaml").read_text())
    assert config["rewards"] == [{"name": "correct", "weight": 1.0}, {"name": "brevity", "weight": 0.1}]
    rows = read_metrics(run)
    evaluated = [r["step"] for r in rows if "eval/sampled_accuracy" in r]
    assert evaluated == [r["step"] for r in rows if "eval/greedy_accuracy" in r] == [0, 3]
    assert all(0.0 <= r["eval/sampled_accuracy"] <= 1.0 for r in rows if "eval/sampled_accuracy" in r)
    assert {"reward/correct", "reward/brevity"} <= set(rows[-1])


def test_import_polo_is_light_and_names_resolve():
    code = ("import sys, polo; light = 'torch' not in sys.modules; "
            "print(light, polo.Trainer.__name__, polo.Recipe.__name__, polo.Callback.__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["True", "Trainer", "Recipe", "Callback"]
    assert set(polo.__all__) <= set(dir(polo))
