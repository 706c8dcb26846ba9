"""The ``test_results`` input: per-test pass/fail ``[B, U]`` with NaN padding, read from the rewards' sandbox
runs without running any program a second time."""
import math

import pytest
import torch

from polo.core.registry import ConfigError
from polo.engines.base import Rollouts
from polo.inputs.base import PROVIDERS, ProviderContext
from polo.tasks import Example, build_task, score
from polo.tasks import sandbox

from tests.core.helpers import build_batch

FOUR = Example("f(0)=2 f(2)=8 f(3)=11 | def f(x): return ", "3*x+2",
               {"inputs": ((1,), (4,), (5,), (9,)), "outputs": (5, 14, 17, 29)})
TWO = Example("f(1)=1 f(7)=5 f(8)=5 | def f(x): return ", "min(x,5)", {"inputs": ((2,), (6,)), "outputs": (2, 5)})


def provide(task, examples, completions):
    rollouts = Rollouts(build_batch([0.0] * len(completions)), list(completions), list(examples))
    context = ProviderContext(None, {}, None, task, {}, {"test_results"})
    return PROVIDERS.get("test_results")(context, rollouts)["test_results"]


@pytest.fixture
def counted(monkeypatch):
    """The sandbox's runs, counted, with an empty result cache."""
    sandbox.isolation_mode()  # the one-time probe is not a run of ours
    monkeypatch.setattr(sandbox, "RESULTS", sandbox.ResultCache())
    runs = []
    real = sandbox.run_program
    monkeypatch.setattr(sandbox, "run_program", lambda source, *a, **k: runs.append(source) or real(source, *a, **k))
    return runs


def test_pass_fail_table_with_nan_padding(counted):
    task = build_task("code")
    examples, completions = [FOUR, FOUR, TWO, TWO, FOUR], ["3*x+2", "min(x,5)*3+2", "min(x,5)", "x", "oops("]
    table = provide(task, examples, completions)
    nan = math.nan
    expected = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0], [1, 1, nan, nan], [1, 0, nan, nan], [0, 0, 0, 0]])
    assert table.shape == (5, 4) and table.dtype == torch.float32
    assert torch.equal(table.isnan(), expected.isnan()) and torch.equal(table.nan_to_num(-1), expected.nan_to_num(-1))
    assert len(counted) == 4  # "oops(" is no expression: it fails without running


def test_no_second_run_after_the_rewards(counted):
    task = build_task("code")
    examples, completions = [FOUR] * 4 + [TWO] * 4, ["3*x+2", "x+4", "3*x+2", "17", "min(x,5)", "x", "x", "5"]
    values, _, _ = score(task, task.default_rewards, examples, completions)
    assert len(counted) == 6  # one run per distinct (program, tests)
    table = provide(task, examples, completions)
    assert len(counted) == 6
    passed = torch.nansum(table, 1) / (~table.isnan()).sum(1)
    assert torch.allclose(passed, values[:, 1])  # the provider agrees with tests_passed


def test_a_miss_runs_the_sandbox_once(counted):
    task = build_task("code")
    provide(task, [FOUR, FOUR], ["3*x+2", "3*x+2"])  # e.g. rewards scored on Ray workers: nothing cached here
    provide(task, [FOUR, FOUR], ["3*x+2", "3*x+2"])
    assert counted == [sandbox.ProgramTests("def f(x):\n    return 3*x+2\n", ()).source]


def test_a_task_without_hidden_tests_is_refused():
    with pytest.raises(ConfigError, match="test_results.*task 'addition' has none"):
        provide(build_task("addition"), [Example("1+1=", "2")], ["2"])
