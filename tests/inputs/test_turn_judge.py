"""The per-turn judge provider: what the judge reads of a turn, its scores, presence and failure metrics (a scripted
judge), an OpenAI-compatible stub endpoint as the judge, and MAPO trained on it (``advantage.judge: role``)."""
import math

import pytest
import torch

from polo.core.advantages.mapo import MAPO
from polo.engines.base import Rollouts
from polo.engines.episodes import TurnRecord
from polo.inputs.base import PROVIDERS, ProviderContext
from polo.roles.base import ROLES
from polo.roles.judge import Judge, Scored
from polo.train.config import load_recipe
from polo.train.trainer import Trainer

from tests.core.helpers import build_batch
from tests.core.stub_endpoint import stub_endpoint

# Two GuessNum dialogues of one task: (action, observation) per turn; the oracle judge of each turn.
DIALOGUES = [[("c?", "u: it is small"), (">4?", "u: yes"), ("=7", "u: correct")],
             [("=3", "u: wrong"), ("x", "u: ??"), (">9?", "u: no")]]
ORACLE = [0.25, 0.25, 0.0, 0.1, 0.0, 0.0]
TEMPLATE = "{prompt}#{response}"


def records():
    out = []
    for traj, turns in enumerate(DIALOGUES):
        context = "u: guess my number 1-16|"
        for step, (action, obs) in enumerate(turns):
            out.append(TurnRecord(traj, step, context, action, obs, 0.0, {}, 0, "u: guess my number 1-16", "7", "="))
            context += f"{action};{obs}|"
    return out


def rollouts():
    turns = records()
    batch = build_batch([1.0] * 3 + [0.0] * 3)
    batch.extras.update(traj=torch.tensor([r.traj for r in turns]), step=torch.tensor([r.step for r in turns]),
                        judge=torch.tensor(ORACLE, dtype=torch.float64))
    return Rollouts(batch, [r.action for r in turns], [None] * len(turns), turns)


def helpful(turn: str) -> float:
    """The stub's verdict on a turn ``<action>;<observation>``: 1 when the user's answer narrowed the number."""
    return float(any(word in turn for word in ("it is", "yes", "correct")))


def provide(judge, needs=("turn_judge",)):
    ctx = ProviderContext(None, {"judge": judge}, None, None, {}, set(needs))
    got = rollouts()
    for name, value in PROVIDERS.get("turn_judge")(ctx, got).items():
        got.batch.set_input(name, value)
    return got, ctx.metrics


def test_the_judge_reads_each_turns_context_action_and_observation_and_failures_are_nan():
    seen = []

    def scorer(texts, completions):
        seen.extend(texts)
        scores = [helpful(t.split("#")[1]) for t in texts]
        return Scored(torch.tensor(scores), [None if c != "x;u: ??" else "unparseable" for c in completions])

    got, metrics = provide(Judge([("score", TEMPLATE)], scorer), {"turn_judge", "turn_judge_scores"})
    x = got.batch.extras
    assert seen[1] == "u: guess my number 1-16|c?;u: it is small|#>4?;u: yes"
    assert x["turn_judge"][[0, 1, 2, 3, 5]].tolist() == [1.0, 1.0, 1.0, 0.0, 0.0] and x["turn_judge"][4].isnan()
    assert x["turn_judge_present"].tolist() == [1.0, 1.0, 1.0, 1.0, 0.0, 1.0]
    assert x["turn_judge_scores"].shape == (6, 1)
    assert metrics == {"turn_judge/failures": 1.0, "turn_judge/failure_rate": 1 / 6,
                       "turn_judge/failures_unparseable": 1.0}
    # MAPO on the judge's scores (the failed turn counts as the mean judged turn) differs from the oracle's
    role, oracle = MAPO()(got.batch), MAPO(judge="oracle")(got.batch)
    assert role.diagnostics["mapo/judge_missing_frac"] == pytest.approx(1 / 6)
    assert not torch.allclose(role.advantages, oracle.advantages)


def test_step_rows_are_required():
    ctx = ProviderContext(None, {"judge": None}, None, None, {}, {"turn_judge"})
    got = rollouts()
    got.turns = None
    with pytest.raises(ValueError, match="turn_judge.*engine: {name: multi_turn}"):
        PROVIDERS.get("turn_judge")(ctx, got)


def test_every_turn_judge_input_comes_from_one_provider_that_needs_the_judge():
    providers = {PROVIDERS.get(n) for n in ("turn_judge", "turn_judge_scores", "turn_judge_present")}
    assert len(providers) == 1 and providers.pop().roles == {"judge"}


@pytest.fixture
def stub_judge():
    """An endpoint answering each prompt ``...#<turn>`` with yes or no (``helpful``); yields (url, prompts)."""
    prompts = []
    with stub_endpoint(lambda p: " yes" if helpful(p.rsplit("#", 1)[-1]) else " no", prompts) as url:
        yield url, prompts


def http_judge(url: str) -> str:
    return f"roles.judge={{backend: http, url: '{url}', model: stub, template: '{TEMPLATE}', retries: 0}}"


def test_an_http_judge_scores_the_turns(stub_judge):
    url, prompts = stub_judge
    judge = ROLES.build({"name": "judge", "backend": "http", "url": url, "model": "stub", "template": TEMPLATE,
                         "retries": 0}, "roles.judge").build(None)
    got, metrics = provide(judge)
    assert got.batch.extras["turn_judge"].tolist() == [1.0, 1.0, 1.0, 0.0, 0.0, 0.0]
    assert metrics["turn_judge/failures"] == 0 and len(prompts) == 6


def test_mapo_trains_on_an_http_judge(tiny, tmp_path, stub_judge):
    """Seed 0, 2 steps: every turn is judged by the stub (no failure), the judge's mean is strictly inside (0, 1)
    (both verdicts given) and MAPO reads it."""
    url, prompts = stub_judge
    recipe = load_recipe("mapo", [*tiny, "advantage.judge=role", http_judge(url), "train.steps=2",
                                  "train.eval_every=2", "train.eval_size=4", "rollout.samples_per_prompt=4",
                                  "train.skip_zero_advantage_rows=false"])
    rows = Trainer(recipe, tmp_path / "run", log=lambda *_: None).run()[1:]
    assert len(rows) == 2
    for row in rows:
        assert row["turn_judge/failures"] == 0 and row["mapo/judge_missing_frac"] == 0
        assert 0 < row["mapo/judge_mean"] < 1 and math.isfinite(row["mapo/judge_std"])
    assert prompts and all("#" in p for p in prompts)
