"""KBLookup-v0: the golden knowledge bases and transcripts, tool errors, oracles and the two variants."""
from polo.envs import expert_policy, make, play


def kb_rows(env):
    return ", ".join(f"{name}{{{','.join(row)}}}" for name, row in env._kb.items())


def test_seed0_golden():
    env = make("KBLookup-v0")
    run = play(env, 0, expert_policy)
    assert kb_rows(env) == ("zozo{temi,rim,yak}, kate{temi,bay,yak}, nipe{nimi,fen,dog}, zote{nipe,rim,emu}, "
                            "peva{zozo,ash,owl}, suru{zote,fen,cat}, nimi{nipe,elm,owl}, temi{peva,ash,dog}")
    assert (env.prompt, env.gold, env.chain) == ("q: city of temi?", "ash", ["temi"])
    assert [(a, r.observation, r.reward) for _, a, r in run.steps] == [
        ("s:temi", "temi: f=peva c=ash p=dog", 0.0), ("a:ash", "done", 1.0)]
    assert run.success


def test_seed1_golden_with_oracles():
    env = make("KBLookup-v0")
    run = play(env, 1, expert_policy)
    assert (env.prompt, env.gold, env.chain) == ("q: pet of friend of kazo?", "cat", ["kazo", "pepe"])
    assert [(a, r.observation, r.reward) for _, a, r in run.steps] == [
        ("s:kazo", "kazo: f=pepe c=ash p=cat", 0.0), ("s:pepe", "pepe: f=zosu c=fen p=cat", 0.0),
        ("a:cat", "done", 1.0)]
    infos = [r.info for _, _, r in run.steps]
    assert [i["ev"] for i in infos] == [1.0, 1.0, 0.0]
    assert [i["hops_resolved"] for i in infos] == [1, 2, 2]
    assert [i["depends_on"] for i in infos] == [[], [(0, "support")], [(0, "support"), (1, "support")]]


def test_tool_error_invalid_and_failed_use():
    env = make("KBLookup-v0", format_penalty=0.5)
    env.reset(1)
    none = env.step("s:zzzz")
    assert none.observation == "none" and none.info["tool_error"] and none.info["valid"]
    hello = env.step("hello")
    assert (hello.observation, hello.reward, hello.info["valid"]) == ("invalid", -0.5, False)
    retry = env.step("s:kazo")
    assert retry.info["depends_on"] == [(0, "failed")] and retry.info["ev"] == 1.0
    wrong = env.step("a:dog")
    assert wrong.terminated and wrong.reward == 0.0 and not env.success
    assert env.done


def test_valid_actions_grow_with_what_was_seen():
    env = make("KBLookup-v0")
    env.reset(1)
    assert env.valid_actions() == ["s:kazo"]
    env.step("s:kazo")
    assert env.valid_actions() == ["s:kazo", "s:pepe", "a:ash", "a:cat"]


def test_memory_variant_renders_question_memory_and_last_observation():
    env = make("KBLookup-v0", memory=True)
    run = play(env, 1, expert_policy)
    assert [a for _, a, _ in run.steps] == ["s:kazo", "s:pepe", "m:pepe p=cat", "a:cat"] and run.success
    assert [c for c, _, _ in run.steps] == [
        "q: pet of friend of kazo?|m:", "q: pet of friend of kazo?|m:|kazo: f=pepe c=ash p=cat",
        "q: pet of friend of kazo?|m:|pepe: f=zosu c=fen p=cat", "q: pet of friend of kazo?|m:pepe p=cat|ok"]
    assert run.steps[2][2].info["depends_on"] == [(0, "support"), (1, "support")]
    env.reset(1)
    assert not env.step("m:" + "x" * 25).info["valid"] and env.step("m:" + "x" * 24).info["valid"]


def test_skill_variant_searches_two_hops_in_one_turn():
    env = make("KBLookup-v0", skills=True)
    run = play(env, 1, expert_policy)
    assert [(a, r.observation) for _, a, r in run.steps] == [
        ("s2:kazo", "kazo: f=pepe c=ash p=cat, pepe: f=zosu c=fen p=cat"), ("a:cat", "done")]
    assert run.steps[0][2].info["hops_resolved"] == 2
    plain = make("KBLookup-v0")
    plain.reset(1)
    assert plain.step("s2:kazo").observation == "invalid" and plain.step("m:kazo").observation == "invalid"
