"""RTPO's reverse_turn engine checkpoints its sweep: a run stopped in the middle of a sweep and resumed ends bit
for bit where an uninterrupted run ends (the same weights and the same metrics)."""
from safetensors.torch import load_file

from polo.train.checkpoint import latest_checkpoint
from polo.train.config import load_recipe
from polo.train.metrics import read_metrics
from polo.train.trainer import Trainer, resume

SMALL = ["rollout.prompts_per_step=2", "rollout.samples_per_prompt=2", "engine.nodes_per_task=1",
         "engine.continuations=3", "train.eval_every=2", "train.eval_size=4", "train.save_every=2",
         "task.env.invalid_penalty=0.1"]
"""A sweep of 2 tasks x 2 base episodes (TextGrid, up to 12 turns), one node of 3 continuations per level; an
invalid action costs 0.1, so that continuations' returns differ and every level trains."""


def deterministic(rows):
    return [{k: v for k, v in r.items() if not k.startswith(("time/", "perf/", "elapsed"))} for r in rows]


def test_rtpo_resumed_in_the_middle_of_a_sweep_ends_where_an_uninterrupted_run_ends(tmp_path, tiny):
    settings = [*tiny, *SMALL, "train.steps=4"]
    full = Trainer(load_recipe("rtpo", settings), tmp_path / "full", log=lambda *_: None)
    full.run()
    cut = Trainer(load_recipe("rtpo", [*settings, "train.steps=2"]), tmp_path / "cut", log=lambda *_: None)
    cut.run()
    assert cut.engine.level > 0  # stopped with levels of its sweep still to serve
    resume(tmp_path / "cut", log=lambda *_: None, overrides=["train.steps=4"]).run()
    a = load_file(str(latest_checkpoint(tmp_path / "full") / "policy.safetensors"))
    b = load_file(str(latest_checkpoint(tmp_path / "cut") / "policy.safetensors"))
    assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a)
    rows = [row for row in read_metrics(tmp_path / "full") if "optim/grad_norm" in row]
    assert len(rows) == 4 and all(row["optim/grad_norm"] > 0 for row in rows)
    assert deterministic(read_metrics(tmp_path / "full")) == deterministic(read_metrics(tmp_path / "cut"))
