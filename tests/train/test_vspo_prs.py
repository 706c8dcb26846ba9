"""vspo_prs end to end on the built-in model: a killed run resumes bit for bit (the value sampler's pass-rate
table is checkpointed), and the long-form PRS path scores complete rows with a local causal judge.

The TINY model is warm-started for 150 steps on tool_calc (its completions then mix malformed and well-formed
calls, so PRS rewards vary) and rolls out 4 samples per prompt, so that some groups are constant and refilled.
"""
import math
import re

import torch

from polo.tasks import build_task
from polo.train.config import load_recipe
from polo.train.trainer import Trainer, resume

SETTINGS = ["seed=0", "warm_start.steps=150", "warm_start.target_accuracy=null", "rollout.samples_per_prompt=4",
            "optim.schedule=constant", "train.eval_every=100", "train.save_every=1",
            "model.tiny.max_position_embeddings=192"]  # room for a judge's prompt, completion and verdict


def deterministic(rows):
    return [{k: v for k, v in r.items() if not k.startswith(("time/", "perf/", "elapsed", "eval/"))}
            for r in rows if r["step"] > 0]


def test_killed_vspo_prs_run_resumes_bit_for_bit(tiny, tmp_path):
    overrides = [*tiny, *SETTINGS]
    whole = Trainer(load_recipe("vspo_prs", overrides), tmp_path / "full", log=lambda *_: None)
    full = whole.run()
    Trainer(load_recipe("vspo_prs", [*overrides, "train.steps=2"]), tmp_path / "cut", log=lambda *_: None).run()
    resumed = resume(tmp_path / "cut", log=lambda *_: None, overrides=["train.steps=3"])
    rest = resumed.run()
    assert rest[-1]["step"] == 3
    assert sum(r["sampler/resample_rounds"] for r in full[1:]) > 0  # groups were dropped and refilled
    assert deterministic(full)[-1] == deterministic(rest)[-1]
    tables = [t.components["prompt_sampler"].state_dict()["pass_rate"] for t in (whole, resumed)]
    assert (~tables[0].isnan()).sum() > 0 and torch.equal(tables[0].nan_to_num(-1), tables[1].nan_to_num(-1))


def test_long_form_prs_with_a_causal_judge(tiny, tmp_path):
    overrides = [*tiny, *SETTINGS, "train.steps=2", "rewards=[{name: prs_format}]", "shaping=[{name: prs_judge}]",
                 "roles.judge={backend: causal, template: '{prompt}{response} right?'}",
                 "prompt_sampler.signal=correct", "prompt_sampler.max_resample_rounds=1"]
    trainer = Trainer(load_recipe("vspo_prs", overrides), tmp_path / "run", log=lambda *_: None)
    rows = [r for r in trainer.run() if r["step"] > 0]
    assert len(rows) == 2
    batch = trainer.last_rollouts.batch
    assert batch.reward_names == ("prs_format", "prs_judge")
    f_minus_1, judged = batch.rewards[:, 0], batch.rewards[:, 1]
    assert bool((judged[f_minus_1 < 0] == 0).all()) and bool(((judged >= 0) & (judged <= 1)).all())
    for row in rows:
        assert row["judge/failures"] == 0.0 and math.isfinite(row["loss/policy"])


def test_vspo_prs_runs_the_calculator(tiny, tmp_path):
    """Seed 0, 2 steps: every step executes calls (more than one per completion on average, with 2 per
    demonstration), every executed call is followed by the calculator's reply to it, and the replies are not the
    policy's tokens (the masked-in tokens of each finished row spell the completion without them)."""
    trainer = Trainer(load_recipe("vspo_prs", [*tiny, *SETTINGS, "train.steps=2"]), tmp_path / "run",
                      log=lambda *_: None)
    rows = [r for r in trainer.run() if r["step"] > 0]
    assert all(r["log_metric/tool/calls_executed"] > 1.0 for r in rows)
    tool, rollouts = build_task({"name": "tool_calc"}).tool(), trainer.last_rollouts
    batch = rollouts.batch
    own_texts = trainer.policy.decode(batch.response_ids, batch.response_mask)
    replies = 0
    for text, own, truncated in zip(rollouts.completions, own_texts, batch.truncated.tolist()):
        if truncated:
            continue
        kept, at = "", 0
        for call in re.finditer(re.escape(tool.trigger), text):
            reply = tool.respond(text[: call.end()])
            assert text[call.end():].startswith(reply)
            kept, at, replies = kept + text[at: call.end()], call.end() + len(reply), replies + 1
        assert own == kept + text[at:]
    assert replies > len(rollouts.completions)
