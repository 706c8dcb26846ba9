"""CodeFix-v0: golden transcripts, DiDPO's sub-diffs, the test-run tool, invalid actions, determinism, speed."""
import random
import time

import pytest

from polo.core.registry import ConfigError
from polo.envs import expert_policy, make, noisy_expert, play
from polo.envs.codefix import BODIES, INTENDED
from polo.tasks.environment import EnvironmentTask, sandbox_tester

FAST = {"name": "CodeFix-v0", "runner": "python"}


def replace(start, old, new, span):
    return {"start": start, "end": start + 1, "old_start": start, "old_end": start + 1, "type": "replace",
            "old": f"    return {old}", "new": f"    return {new}", "span": span, "origin": "root"}


def test_seed0_golden_in_the_sandbox():
    env = make("CodeFix-v0", sandbox_tester)
    run = play(env, 0, expert_policy)
    assert (env.prompt, env.gold) == ("1 dbl=a*2/2 sq=a*2/3 add=a*a", "2*a,3+b")
    assert [(c, a, r.observation, r.reward, r.terminated, r.truncated) for c, a, r in run.steps] == [
        ("1 dbl=a*2/2 sq=a*2/3 add=a*a", "2*a,3+b", "1 dbl=a*2/2 sq=a*a/3 add=a+b", 0.0, False, False),
        ("1 dbl=a*2/2 sq=a*2/3 add=a*a|2*a,3+b;1 dbl=a*2/2 sq=a*a/3 add=a+b", "s",
         "1 dbl=a*2/2 sq=a*a/3 add=a+b t:pass", 1.0, True, False)]
    first, last = run.steps[0][2].info, run.steps[1][2].info
    assert first == {"valid": True, "tool_error": False, "anchor_obs": "1 dbl=a*2/2 sq=a*2/3 add=a*a",
                     "subdiffs": [replace(4, "a * 2", "a * a", [0, 3]), replace(7, "a * a", "a + b", [4, 7])]}
    assert (last["subdiffs"], last["n_tests"], last["passed"]) == ([], 9, 9) and run.success
    assert env.source == ("def dbl(a, b):\n    return a * 2\n\ndef sq(a, b):\n    return a * a\n\n"
                          "def add(a, b):\n    return a + b\n")


def test_seed1_golden_floor_division():
    env = make(FAST)
    run = play(env, 1, expert_policy)
    assert (env.prompt, env.gold) == ("1 mul=a//a/2 third=a//a/3 sub=a-b", "1*b,2//3")
    assert [(a, r.observation, r.reward) for _, a, r in run.steps] == [
        ("1*b,2//3", "1 mul=a*b/2 third=a//3/3 sub=a-b", 0.0), ("s", "1 mul=a*b/2 third=a//3/3 sub=a-b t:pass", 1.0)]
    assert run.steps[0][2].info["subdiffs"] == [replace(1, "a // a", "a * b", [0, 3]),
                                                 replace(4, "a // a", "a // 3", [4, 8])]


def test_partly_right_multi_edit_and_no_op_commands():
    env = make(FAST)
    env.reset(0)  # 1 dbl=a*2 (right), 2 sq=a*2, 3 add=a*a
    out = env.step("1*2,2*a,3-b")  # line 1 unchanged: no sub-diff; 2 fixed; 3 still wrong
    assert out.observation == "1 dbl=a*2/2 sq=a*a/3 add=a-b" and out.reward == 0.0 and not out.terminated
    assert out.info["subdiffs"] == [replace(4, "a * 2", "a * a", [4, 7]), replace(7, "a * a", "a - b", [8, 11])]
    done = env.step("s")
    # add=a-b: (2,3) -> -1 != 5, (5,1) -> 4 != 6, (7,4) -> 3 != 11; the other 6 tests pass
    assert (done.observation, done.reward, done.info["passed"]) == ("1 dbl=a*2/2 sq=a*a/3 add=a-b t:fail 3",
                                                                    6 / 9, 6)
    assert done.terminated and not env.success


def test_rotated_bodies_diff_line_by_line():
    env = make(FAST)
    env.reset(0)
    env.step("1*b,2//2,3-1")
    out = env.step("1-1,2*b,3//2")  # each body moves to the next function: a plain line diff would shift them
    assert out.info["subdiffs"] == [replace(1, "a * b", "a - 1", [0, 3]), replace(4, "a // 2", "a * b", [4, 7]),
                                    replace(7, "a - 1", "a // 2", [8, 12])]


def test_test_run_tool_reports_failing_functions():
    env = make("CodeFix-v0", sandbox_tester)
    env.reset(0)
    out = env.step("t")
    assert out.observation == "1 dbl=a*2/2 sq=a*2/3 add=a*a t:fail 2,3" and out.reward == 0.0
    # dbl passes 3, sq=a*2 passes (2, 3) only (2*2 == 2*2), add=a*a none
    assert (out.info["subdiffs"], out.info["n_tests"], out.info["passed"]) == ([], 9, 4)
    assert not out.terminated and not out.truncated
    assert env.step("2*a,3+b").observation == "1 dbl=a*2/2 sq=a*a/3 add=a+b"  # the report is dropped after an edit


@pytest.mark.parametrize("action", ["", "hello", "4+b", "1+b,1-b", "1+c", "1 +b", "1+b,", "0+b", "1/2", "1**2", "S"])
def test_invalid_actions_change_nothing(action):
    env = make(FAST)
    env.reset(0)
    out = env.step(action)
    assert (out.observation, out.reward, out.info["valid"], out.info["subdiffs"]) == (
        "1 dbl=a*2/2 sq=a*2/3 add=a*a ?", 0.0, False, [])
    assert env.source.count("return a * 2") == 2 and not out.terminated


def test_truncation_scores_the_last_state():
    env = make({**FAST, "max_turns": 2})
    env.reset(0)
    env.step("2*a")
    out = env.step("1+1")  # the last turn: an edit, then the tests (dbl=a+1 fails all 3, add=a*a passes 0)
    assert (out.observation, out.reward, out.terminated, out.truncated) == (
        "1 dbl=a+1/2 sq=a*a/3 add=a*a t:fail 1,3", pytest.approx(3 / 9), False, True)
    assert out.info["subdiffs"] == [replace(1, "a * 2", "a + 1", [0, 3])] and env.done and not env.success
    env = make({**FAST, "max_turns": 1})
    env.reset(0)
    bad = env.step("zzz")
    assert bad.truncated and bad.observation == "1 dbl=a*2/2 sq=a*2/3 add=a*a ? t:fail 2,3" and not bad.info["valid"]


def test_same_seed_and_actions_give_the_same_transcript():
    def flat(t):
        return [(c, a, r) for c, a, r in t.steps]

    runs = [play(make(FAST), 7, noisy_expert(0.6, random.Random(3))) for _ in range(2)]
    assert flat(runs[0]) == flat(runs[1]) and len(runs[0].steps) >= 2
    sandbox = play(make("CodeFix-v0", sandbox_tester), 7, noisy_expert(0.6, random.Random(3)))
    assert flat(sandbox) == flat(runs[0])  # the sandbox and plain Python agree


def test_sandbox_agrees_with_the_python_oracle_on_every_body():
    seen = set()
    for seed in (0, 2):  # together every catalog name
        for op, operand in BODIES:
            action = ",".join(f"{line}{op}{operand}" for line in range(1, 10))
            results = []
            for runner in ("sandbox", "python"):
                env = make("CodeFix-v0", sandbox_tester, n_funcs=9, runner=runner)
                env.reset(seed)
                env.step(action)
                results.append(env.step("t"))
            assert results[0] == results[1]
            seen.update(env._names)
    assert seen == set(INTENDED)


def test_rewards_stay_in_0_1_and_noisy_experts_vary():
    env = make(FAST)
    rewards, outcomes = [], {}
    for seed in range(40):
        for i in range(6):
            run = play(env, seed, noisy_expert(0.5, random.Random(100 * seed + i)))
            rewards += [r.reward for _, _, r in run.steps]
            outcomes.setdefault(seed, set()).add(run.success)
    assert all(0.0 <= r <= 1.0 for r in rewards) and 0.0 < sum(rewards) / len(rewards) < 1.0
    assert any(len(v) == 2 for v in outcomes.values())


def test_expert_solves_every_size_within_the_action_limit():
    for n_funcs in (1, 3, 5, 9):
        env = make(FAST, n_funcs=n_funcs, n_bugs=n_funcs, max_turns=n_funcs + 1)
        for seed in range(30):
            run = play(env, seed, expert_policy)
            assert run.success and all(len(a) <= env.max_action_chars for _, a, _ in run.steps)
    env = make(FAST)
    for seed in range(200):
        assert play(env, seed, expert_policy).success


def test_valid_actions_are_fixed_order_valid_and_hold_partly_right_fixes():
    env = make(FAST)
    env.reset(0)
    actions = env.valid_actions()
    assert actions[:3] == ["1+a", "1+b", "1+1"] and actions[60:62] == ["t", "s"] and len(actions) == len(set(actions))
    assert env.gold in actions and "1+a,2*a,3+b" in actions and "2*a,3-b" in actions
    assert actions == env.valid_actions()
    for action in actions:
        probe = make(FAST)
        probe.reset(0)
        assert probe.step(action).info["valid"]


def test_config_errors_name_the_value():
    with pytest.raises(ConfigError, match="n_bugs=4 exceeds n_funcs=3"):
        make("CodeFix-v0", n_bugs=4)
    with pytest.raises(ConfigError, match="n_funcs"):
        make("CodeFix-v0", n_funcs=10)
    with pytest.raises(ConfigError, match="runner"):
        make("CodeFix-v0", runner="exec")


def test_the_sandbox_is_received_from_the_builder():
    with pytest.raises(ConfigError, match=r"built without one: build it with make\(config, sandbox=tester\)"):
        make("CodeFix-v0")
    with pytest.raises(ConfigError, match="sandbox must be a program tester"):
        make({"name": "CodeFix-v0", "sandbox": {"timeout_s": 5}})
    calls = []
    env = make("CodeFix-v0", lambda source, tests, function: calls.append(function) or [True] * len(tests))
    env.reset(0)
    assert env.step("t").observation.endswith(" t:pass") and calls == ["check"]
    assert make(FAST).runner == "python"  # plain Python needs no sandbox
    task = EnvironmentTask(env={"name": "CodeFix-v0"})
    assert task.make_env()._sandbox is sandbox_tester and task.make_env(max_turns=2).turn_limit == 2
    assert make("TextGrid-v0", sandbox_tester).name == "TextGrid-v0"  # an environment that runs no program: unused


def test_a_step_takes_under_a_millisecond_without_the_sandbox():
    env = make(FAST)
    policy = noisy_expert(0.3, random.Random(0))
    steps, start = 0, time.process_time()  # CPU time: other processes on the machine do not count
    for seed in range(300):
        steps += len(play(env, seed, policy).steps)  # resets, experts, valid actions included
    per_step = (time.process_time() - start) / steps
    assert per_step < 1e-3, f"{per_step * 1e6:.0f} us per step"
