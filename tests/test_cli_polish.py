"""CLI polish: `polo list` into a closed pipe, readable descriptions, no run folder from a failing `polo train`,
and `--resume` that extends a finished run and refuses anything else."""
import contextlib
import io
import json
import os
import shlex
import subprocess
import sys

import pytest

from polo.catalog import ALL_REGISTRIES, plain
from polo.core.registry import summary as _summary
from polo.cli import main

LIST = [sys.executable, "-m", "polo.cli", "list"]


def test_polo_list_into_head_ends_quietly():
    done = subprocess.run(f"{shlex.join(LIST)} | head -1", shell=True, capture_output=True, text=True, timeout=120)
    assert done.stdout.startswith("engine (") and done.stdout.count("\n") == 1
    assert done.stderr == "", done.stderr


def test_polo_list_into_a_closed_pipe_exits_as_sigpipe_without_a_traceback():
    read, write = os.pipe()
    os.close(read)  # every write now fails: the deterministic form of `| head` exiting early
    try:
        done = subprocess.run(LIST, stdout=write, stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write)
    assert done.returncode == 141 and done.stderr == "", done.stderr


@pytest.fixture(scope="module")
def listing():
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["list"]) == 0
    return out.getvalue()


def test_descriptions_carry_no_rst_markup(listing):
    assert "``" not in listing and ":math:" not in listing and "`" not in listing


def test_descriptions_are_cut_at_word_boundaries(listing):
    lines, kind = {}, None
    for line in listing.split(" components\n")[0].splitlines():
        if line.startswith("  "):
            lines[kind, line.split()[0]] = line
        else:
            kind = line.split(" (")[0]
    for registry in ALL_REGISTRIES:
        for name, cls in registry:
            full = plain(_summary(cls))
            shown = lines[registry.kind, name][28:].rsplit("  [", 1)[0]
            if shown.endswith(" …"):
                kept = shown[: -len(" …")]
                assert full.startswith(kept) and full[len(kept)] == " ", (name, shown)
            else:
                assert shown == full, name


def test_tasks_show_their_options_and_rewards_their_descriptions(listing):
    assert "options: digits=2, test_fraction=0.1" in listing
    assert "options: count=3, max_value=9, test_fraction=0.1" in listing
    assert "options: path, verifier=exact, test_fraction=0.1" in listing
    assert "exact_match               1.0 if the stripped completion equals the stripped answer." in listing


RAISING_REWARD = """from polo.tasks import register_reward

@register_reward("test_raises_always")
def raises(prompts, completions, **kwargs):
    raise KeyError("no such column")
"""


@pytest.fixture(scope="module")
def raising_plugin(tmp_path_factory):
    """One file for every case: a plugin path is imported once per session."""
    path = tmp_path_factory.mktemp("plugin") / "raising_reward.py"
    path.write_text(RAISING_REWARD)
    return path


@pytest.mark.parametrize("argv, expected", [
    (["rewards=[{name: nope, weight: 1}]"], "unknown reward 'nope'"),
    (["task={name: addition, digits: 0}"], "task.digits"),
    (["rewards=[{name: test_raises_always}]"], "reward 'test_raises_always'"),
])
def test_a_failing_train_leaves_no_run_folder(argv, expected, raising_plugin, tiny, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code = main(["--plugin", str(raising_plugin), "train", "grpo", *tiny, *argv, "--run-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code != 0 and expected in err and "Traceback" not in err, err
    assert not (tmp_path / "run").exists() and not (tmp_path / "runs").exists()


def metrics_steps(run):
    return [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_resume_extends_a_finished_run_by_exactly_the_new_steps(tiny, tmp_path, capsys):
    run = tmp_path / "run"
    settings = ["train.steps=2", "train.save_every=1", "train.eval_every=1"]
    assert main(["train", "grpo", *tiny, *settings, "--run-dir", str(run)]) == 0
    assert metrics_steps(run) == [0, 1, 2]
    capsys.readouterr()
    assert main(["train", "--resume", str(run), "train.steps=3"]) == 0
    assert "at step 2" in " ".join(capsys.readouterr().err.split())
    assert metrics_steps(run) == [0, 1, 2, 3]
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step_000002", "step_000003"]

    code = main(["train", "--resume", str(run), "optim.lr=0.1"])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and "refused: optim.lr" in lines[0], lines
    assert metrics_steps(run) == [0, 1, 2, 3]
