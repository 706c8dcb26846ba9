"""TextGrid-v0: the golden transcripts, observation hashing, aliasing, bumps, penalties and oracles."""
import pytest

from polo.envs import expert_policy, make, obs_hash, play


def expert_run(seed, **cfg):
    env = make("TextGrid-v0", **cfg)
    return env, play(env, seed, expert_policy)


def test_seed0_global_golden_and_hash():
    env, run = expert_run(0)
    assert env.prompt == "r0c2 g:r3c2" and env.gold == "r3c2" and env.optimal_length == 3
    assert [(a, r.observation, r.reward, r.terminated) for _, a, r in run.steps] == [
        ("s", "r1c2 g:r3c2", 0.0, False), ("s", "r2c2 g:r3c2", 0.0, False), ("s", "r3c2 g:r3c2", 1.0, True)]
    assert run.success and run.total_reward == 1.0
    assert [r.info["distance"] for _, _, r in run.steps] == [2, 1, 0]
    assert run.steps[0][2].info["anchor_obs"] == "r0c2 g:r3c2"
    assert obs_hash("r0c2 g:r3c2") == "9662184cdd3fc1ce" == obs_hash("  r0c2   g:r3c2\n")


def test_seed1_local_golden():
    env, run = expert_run(1, obs_mode="local")
    assert env.prompt == "#.#/.@#/..# g:nw" and env.gold == "r1c3" and env.optimal_length == 3
    assert [a for _, a, _ in run.steps] == ["n", "n", "w"]
    assert [r.info["anchor_obs"] for _, _, r in run.steps] == ["#.#/.@#/..# g:nw", "g.#/#@#/..# g:nw",
                                                               "..#/g@#/#.# g:w"]
    assert run.steps[-1][2].observation == ".../.@./.#. g:" and run.success


def test_seed1_global_and_invalid_action():
    env = make("TextGrid-v0")
    assert env.reset(1) == "r3c4 g:r1c3"
    obs, reward, terminated, truncated, info = env.step("q")
    assert (obs, reward, terminated, truncated, info["valid"], info["bump"]) == ("r3c4 g:r1c3", 0.0, False, False,
                                                                                 False, False)
    assert [env.step(a).observation for a in "nnw"] == ["r2c4 g:r1c3", "r1c4 g:r1c3", "r1c3 g:r1c3"]


def test_seed2_local_aliasing():
    env, run = expert_run(2, obs_mode="local")
    assert [a for _, a, _ in run.steps] == ["s", "s", "e", "e", "e"] and env.optimal_length == 5
    anchors = [r.info["anchor_obs"] for _, _, r in run.steps]
    assert anchors[2] == anchors[3] == ".../.@./... g:e"          # r3c1 and r3c2 look the same
    global_anchors = [r.info["anchor_obs"] for _, _, r in expert_run(2)[1].steps]
    assert global_anchors[2:4] == ["r3c1 g:r3c4", "r3c2 g:r3c4"]


def test_bump_stays_put_and_penalties_apply():
    env = make("TextGrid-v0", invalid_penalty=0.1, step_penalty=0.01)
    env.reset(0)                                   # r0c2, no walls: north is the border
    obs, reward, _, _, info = env.step("n")
    assert obs == "r0c2 g:r3c2" and info["bump"] and info["valid"] and reward == -0.01
    assert env.step("north").reward == -0.1
    assert [env.step("s").reward for _ in range(3)] == [-0.01, -0.01, 1.0]


def test_truncated_at_max_steps():
    env = make("TextGrid-v0", max_steps=2)
    env.reset(0)
    assert env.step("w")[2:4] == (False, False)
    assert env.step("w")[2:4] == (False, True) and env.done and not env.success


def test_unsolvable_configuration_is_an_error():
    with pytest.raises(ValueError, match="wall_p=0.95"):
        make("TextGrid-v0", wall_p=0.95).reset(0)
