"""The multi_turn engine's step-row inputs, its rollout trees (OPO siblings, CIPO replays), the probe
providers built from its turn records, and a chat-template checkpoint playing GuessNum."""
import math

import pytest
import torch

from polo.envs import TURN_SEP, make
from polo.policy import Policy
from polo.policy.policy import build_tiny_policy
from polo.policy.tiny import TinyModelConfig
from polo.inputs.agent_probes import answer_logp, counterfactual_context, gold_logp, info_gain, memory_utility
from polo.engines.base import ENGINES, EngineSetup
from polo.policy.prefix import distinct_prompts
from polo.engines.episodes import Tree, TurnRecord
from polo.inputs.base import ProviderContext
from polo.tasks import build_task


@pytest.fixture(scope="module")
def policy():
    torch.manual_seed(0)
    return build_tiny_policy(TinyModelConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64,
                                             max_position_embeddings=256))


def played(policy, env, G=4, n=3, seed=0, window=4, **engine):
    task = build_task({"name": "environment", "env": env, "history_window": window})
    eng = ENGINES.build({"name": "multi_turn", **engine}, "engine")
    eng.setup(EngineSetup(task, [], G, task.max_completion_chars + 1))
    examples = task.examples("train", n, seed=seed)
    return task, eng, eng.rollout(policy, examples, list(range(n)), torch.Generator().manual_seed(seed))


def rows_of(x, traj):
    rows = (x["traj"] == traj).nonzero().squeeze(-1).tolist()
    return sorted(rows, key=lambda r: int(x["step"][r]))


def context(task, policy, needs=()):
    return ProviderContext(policy, {}, None, task, {}, set(needs))


def test_next_anchor_is_the_next_turns_anchor_or_the_terminal_sink(policy):
    _, _, got = played(policy, {"name": "TextGrid-v0", "obs_mode": "local"}, G=8, n=3)
    x, turns = got.batch.extras, got.turns
    for t in set(x["traj"].tolist()):
        rows = rows_of(x, t)
        for a, b in zip(rows, rows[1:]):
            assert int(x["next_anchor"][a]) == int(x["anchor"][b])
        last = turns[rows[-1]]
        if last.terminated:
            assert int(x["next_anchor"][rows[-1]]) == -1
        else:  # truncated: the final state's id if any turn of the group acted in it, else the sink
            group = int(got.batch.group[rows[-1]])
            same = (got.batch.group == group)
            ids = set(x["anchor"][same].tolist())
            assert int(x["next_anchor"][rows[-1]]) in ids | {-1}


def test_environment_oracles_become_step_inputs(policy):
    _, _, kb = played(policy, {"name": "KBLookup-v0"}, G=4, n=4)
    x, turns = kb.batch.extras, kb.turns
    assert x["ev"].tolist() == [r.info["ev"] for r in turns]
    for r, support, failed in zip(turns, x["uses_support"].tolist(), x["uses_failed"].tolist()):
        assert support == sum(1 << j for j, kind in r.info["depends_on"] if kind == "support")
        assert failed == sum(1 << j for j, kind in r.info["depends_on"] if kind == "failed")
    assert x["action_key"].tolist() == [sorted(set(kb.completions), key=kb.completions.index).index(c)
                                        for c in kb.completions]
    _, _, guess = played(policy, {"name": "GuessNum-v0", "teacher_hints": True}, G=4, n=2)
    assert guess.batch.extras["judge"].tolist() == [r.info["judge_score"] for r in guess.turns]
    hinted = [float(r.observation.startswith("u: wrong, hint:")) for r in guess.turns]
    assert guess.batch.extras["hint"].tolist() == hinted


def test_teacher_hints_point_at_a_question_never_the_number():
    env = make({"name": "GuessNum-v0", "teacher_hints": True})
    env.reset(0)  # class small, x = 7
    first = env.step("=3")
    assert first.observation == "u: wrong, hint: ask about the kind of number" and first.info["hint"] == 1.0
    env.step("c?")
    second = env.step("=2")
    assert second.observation.startswith("u: wrong, hint: ask if it is above ") and "7" not in second.observation
    assert env.step("=7").info["hint"] == 0.0


def test_memory_writes_report_before_after_and_relevance():
    env = make({"name": "KBLookup-v0", "memory": True})
    env.reset(0)  # q: city of temi? gold ash, chain [temi]
    useful = env.step("m:temi c=ash").info
    assert (useful["memory_write"], useful["memory_before"], useful["memory_after"]) == (1.0, "", "temi c=ash")
    assert useful["memory_relevance"] == 1.0  # both evidence words (temi, ash) were added
    repeat = env.step("m:temi c=ash zz").info
    assert repeat["memory_relevance"] == 0.0  # nothing of the evidence is new
    assert "memory_write" not in env.step("s:temi").info


def test_gold_logp_is_the_answer_probe_after_each_context(policy):
    task, _, got = played(policy, {"name": "KBLookup-v0"}, G=2, n=2)
    value = gold_logp(context(task, policy), got)["gold_logp"]
    for i in (0, len(got.turns) - 1):
        r = got.turns[i]
        ids, mask = policy.encode_prompts([r.context + "a:"])
        gold, gold_mask = policy.encode_completions([r.gold])
        logp = policy.forward_logp(ids, mask, gold[:, :-1], gold_mask[:, :-1])["logp"]  # no eos in the probe
        assert float(value[i]) == pytest.approx(float(logp.detach().mean()), abs=1e-5)


def test_info_gain_masks_the_previous_observation_and_credits_the_eliciting_turn(policy):
    task, _, got = played(policy, {"name": "KBLookup-v0"}, G=4, n=3)
    gain = info_gain(context(task, policy), got)["info_gain"]
    x = got.batch.extras
    for t in set(x["traj"].tolist()):
        rows = rows_of(x, t)
        assert float(gain[rows[-1]]) == 0.0  # no next turn to read the gain off
    a, b = next((a, b) for t in set(x["traj"].tolist()) for a, b in zip(rows_of(x, t), rows_of(x, t)[1:]))
    prev, nxt = got.turns[a], got.turns[b]
    cf = counterfactual_context(nxt, prev.observation, "none")
    assert len(cf) == len(nxt.context) and cf.endswith(TURN_SEP) and prev.observation not in cf[-len(prev.observation) - 1:]
    response = got.batch.response_ids[[b]], got.batch.response_mask[[b]]
    real = policy.forward_logp(got.batch.prompt_ids[[b]], got.batch.prompt_mask[[b]], *response)["logp"]
    ids, mask = policy.encode_prompts([cf])
    fake = policy.forward_logp(ids, mask, *response)["logp"]
    expected = float((real - fake).detach().sum() / response[1].sum())
    assert float(gain[a]) == pytest.approx(expected, abs=1e-5)


def test_counterfactual_placeholder_is_length_matched():
    r = TurnRecord(0, 1, "q|s:temi;temi: f=peva c=ash p=dog|", "a:ash", "done", 1.0, {}, 0, "q", "ash", "a:")
    assert counterfactual_context(r, "temi: f=peva c=ash p=dog", "none") == "q|s:temi;none" + "e" * 20 + "|"
    assert counterfactual_context(r, "temi: f=peva c=ash p=dog", "x" * 40) == "q|s:temi;" + "x" * 24 + "|"


def test_memory_utility_compares_the_answer_probe_after_and_before_a_write(policy):
    task, _, got = played(policy, {"name": "KBLookup-v0", "memory": True}, G=4, n=3)
    # the untrained policy rarely writes memory; force one write into a record to check the arithmetic
    r = got.turns[0]
    r.info.update(memory_write=1.0, memory_before="", memory_after="temi c=ash")
    utility = memory_utility(context(task, policy), got)["memory_utility"]
    before, after = (answer_logp(policy, [f"{r.prompt}|m:{m}|"], ["a:"], [r.gold]) for m in ("", "temi c=ash"))
    assert float(utility[0]) == pytest.approx(float((after - before).detach()), abs=1e-5)
    assert all(float(u) == 0.0 for u, t in zip(utility, got.turns) if not t.info.get("memory_write"))


def test_opo_siblings_share_the_event_context_and_own_only_their_argument(policy):
    # an untrained policy seldom searches: its first action is forced to start with "s:" (a token-offset branch)
    task = build_task({"name": "environment", "env": {"name": "KBLookup-v0"}})
    eng = ENGINES.build({"name": "multi_turn", "tree": {"name": "opo_observation", "branches": 3, "uncertainty": 0.0,
                                                        "redundancy": 1.0}}, "engine")
    eng.setup(EngineSetup(task, [], 4, task.max_completion_chars + 1))
    examples, generator = task.examples("train", 3, seed=0), torch.Generator().manual_seed(0)
    episodes = eng.start([e.columns["seed"] for e in examples for _ in range(4)])
    calls = eng.play(policy, episodes, generator, False, action_prefix={ep.traj: "s:" for ep in episodes},
                     entropy=True)
    tree = Tree(episodes, calls, {ep.traj: ep.traj // 4 for ep in episodes})
    eng.tree.grow(eng, policy, tree, generator)
    sibling_calls = tree.calls[len(calls):]
    got = eng.step_rows(tree.calls, tree.episodes, tree.group_of, examples, [0, 1, 2], tree.extras)
    # the siblings of one event share its context: the sampler prefills each distinct context once
    ids, mask = sibling_calls[0]["prompt_ids"], sibling_calls[0]["prompt_mask"]
    contexts = {r.context for r in sibling_calls[0]["records"]}
    assert len(distinct_prompts(ids, mask)[0]) == len(contexts) <= len(sibling_calls[0]["records"]) // 3
    b, x = got.batch, got.batch.extras
    siblings = (x["sibling"] == 1).nonzero().squeeze(-1).tolist()
    events = ((x["branch"] >= 0) & (x["sibling"] == 0)).nonzero().squeeze(-1).tolist()
    assert events and len(siblings) == 3 * len(events)
    for s in siblings:
        event = next(e for e in events if int(x["branch"][e]) == int(x["branch"][s]))
        assert torch.equal(b.prompt_ids[s], b.prompt_ids[event]) and int(b.group[s]) == int(b.group[event])
        assert int(x["depth"][s]) == 1 and int(b.parent[s]) == int(x["traj"][event])
        assert int(x["step"][s]) == int(x["step"][event]) and got.completions[s].startswith("s:")
        assert b.response_mask[s, :2].tolist() == [0, 0] and int(x["arg_start"][s]) == 2  # "s:" is forced
        assert float(x["ev"][s]) == got.turns[s].info["ev"]
    roots = x["depth"] == 0
    assert torch.equal(b.parent[roots], torch.full_like(b.parent[roots], -1))


def test_cipo_replays_the_first_granularity_decision(policy):
    _, _, got = played(policy, {"name": "KBLookup-v0", "skills": True}, G=4, n=3, tree={"name": "cipo"})
    x, turns = got.batch.extras, got.turns
    for t in set(x["traj"].tolist()):
        rows = rows_of(x, t)
        decisions = [r for r in rows if x["cf_decision"][r] == 1]
        assert len(decisions) <= 1
        for r in rows:
            if r not in decisions:
                assert float(x["cf_delta"][r]) == 0.0
        if decisions:
            d = decisions[0]
            assert turns[d].action.split(":")[0] in ("s", "s2")
            assert float(x["cf_delta"][d]) in (-1.0, 0.0, 1.0)
            env = make({"name": "KBLookup-v0", "skills": True})
            env.reset(turns[d].seed)
            for r in rows[: int(x["step"][d])]:  # no earlier turn had an alternative granularity
                assert env.alternative(turns[r].action) is None
                env.step(turns[r].action)
            assert env.alternative(turns[d].action) is not None


def test_a_chat_checkpoint_plays_guessnum_and_only_assistant_tokens_are_trainable(chat_checkpoint):
    # GuessNum declares no tools: the actions are written text (KBLookup's tool calls: test_chat_tool_calls.py)
    policy = Policy.load(chat_checkpoint(1024), chat_template=True)
    task, _, got = played(policy, {"name": "GuessNum-v0"}, G=2, n=1, seed=0)
    b = got.batch
    rows = sorted(range(b.batch_size), key=lambda r: int(b.extras["step"][r]))
    last = got.turns[rows[-1]]
    prompt = policy.tokenizer.decode(b.prompt_ids[rows[-1]][b.prompt_mask[rows[-1]].bool()])
    assert prompt.startswith("<|im_start|>user\n" + last.prompt + "<|im_end|>")
    for r in rows:  # every earlier turn of the window (4) sits in the prompt under its role, never in the response
        turn = got.turns[r]
        if last.step - 4 <= turn.step < last.step and turn.traj == last.traj:
            assert f"<|im_start|>assistant\n{turn.action}<|im_end|>\n<|im_start|>tool\n{turn.observation}" in prompt
    assert prompt.endswith("<|im_start|>assistant\n")
    for r in range(b.batch_size):  # the trainable tokens are exactly the assistant's action (and its end token)
        trainable = b.response_ids[r][b.response_mask[r].bool()].tolist()
        text = policy.tokenizer.decode(trainable, skip_special_tokens=True)
        assert text.split(";")[0].strip() == got.completions[r]
    assert math.isfinite(float(b.old_logp.sum()))


def test_recovery_branches_continue_from_erroneous_states_with_a_hint(policy):
    _, _, got = played(policy, {"name": "TextGrid-v0", "obs_mode": "local"}, G=4, n=2,
                       tree={"name": "reflectpo", "branches": 2, "max_points": 3})
    b, x, turns = got.batch, got.batch.extras, got.turns
    children = sorted(set(x["traj"][x["depth"] == 1].tolist()))
    assert children and len(children) <= 2 * 3 * 2  # 2 children per point, at most 3 points per task, 2 tasks
    texts = policy.tokenizer.batch_decode([ids[m.bool()].tolist() for ids, m in zip(b.prompt_ids, b.prompt_mask)],
                                          skip_special_tokens=True)
    for child in children:
        rows = rows_of(x, child)
        first = turns[rows[0]]
        parent_rows = rows_of(x, first.parent)
        assert first.step >= 1 and int(b.group[rows[0]]) == int(b.group[parent_rows[0]])
        erroneous = turns[parent_rows[first.step - 1]]  # the parent's turn that led to the branched state
        assert ", hint: " in texts[rows[0]] and erroneous.observation + ", hint: " in texts[rows[0]]
        assert (not erroneous.info["valid"]) or erroneous.info["tool_error"] or "before" in texts[rows[0]]
        assert float(b.rewards[rows[0], 0]) == pytest.approx(float(x["step_reward"][rows].sum()) +
                                                             sum(turns[r].reward for r in parent_rows[: first.step]))


def test_trajectory_rows_come_from_the_same_records_and_train_each_token_once(policy):
    from polo.engines.trajectory_rows import trajectory_rows

    task, _, got = played(policy, {"name": "GuessNum-v0"}, G=4, n=2, window=6, tree={"name": "reflectpo", "branches": 1})
    view = trajectory_rows(got, policy)
    b, x = got.batch, got.batch.extras
    assert view.traj == sorted(set(x["traj"].tolist()))
    row_of = {(r.traj, r.step): i for i, r in enumerate(got.turns)}
    parent_of = {r.traj: r.parent for r in got.turns}
    assert int(view.loss_mask.sum()) == int(b.response_mask.sum())  # every sampled token trainable exactly once
    for row, (traj, spans) in enumerate(zip(view.traj, view.spans)):
        length = int(view.attention_mask[row].sum())
        assert spans[0].start == 0 and spans[-1].end == length
        assert all(a.end == c.start for a, c in zip(spans, spans[1:]))  # a partition of [0, L)
        for span in spans:
            assert view.loss_mask[row, span.start:span.end].tolist() == [int(span.trainable)] * (span.end - span.start)
            assert span.trainable == (span.kind in ("ACTION", "ANSWER", "MEMORY") and
                                      (traj, int(view.turn_idx[row, span.start])) in
                                      {(t, s) for t, s in zip(x["traj"].tolist(), x["step"].tolist())})
        decode = lambda span: policy.tokenizer.decode(view.input_ids[row, span.start:span.end].tolist(),  # noqa
                                                      skip_special_tokens=True)
        assert all(a.kind in ("ACTION", "ANSWER") for a in spans[1::2])
        assert all(a.kind != "ANSWER" or i == len(spans[1::2]) - 1 for i, a in enumerate(spans[1::2]))
        for action, after in zip(spans[1::2], spans[2::2]):  # each turn: its sampled tokens, then ";obs|"
            owner = traj if action.trainable else parent_of[traj]  # branches of roots only: depth ≤ 1
            r = row_of[owner, int(view.turn_idx[row, action.start])]
            assert decode(action).split(";")[0].strip() == got.turns[r].action
            assert decode(after) == ";" + got.turns[r].observation + "|"


def test_reverse_turn_serves_levels_from_the_last_turn_back_with_the_current_policy(policy):
    task = build_task({"name": "environment", "env": {"name": "GuessNum-v0"}})
    eng = ENGINES.build({"name": "reverse_turn", "nodes_per_task": 2, "continuations": 3}, "engine")
    eng.setup(EngineSetup(task, [], 4, task.max_completion_chars + 1))
    examples, generator = task.examples("train", 2, seed=0), torch.Generator().manual_seed(0)
    levels, versions = [], []
    for version in range(40):
        eng.sync(policy, version)
        before = eng.level
        got = eng.rollout(policy, examples, [0, 1], generator)
        x = got.batch.extras
        level = int(x["step"][0]) + 1
        assert before in (0, level) and (x["step"] == level - 1).all()
        assert (x["policy_version"] == version).all()
        counts = torch.bincount(got.batch.group)
        assert (counts == 3).all() and len(counts) <= 2 * 2  # M rows per node, at most B nodes per task
        for g in range(len(counts)):  # a node's continuations share its stored context exactly
            rows = (got.batch.group == g).nonzero().squeeze(-1)
            assert (got.batch.prompt_ids[rows] == got.batch.prompt_ids[rows[0]]).all()
        shown = eng.after_update(got.batch, None)  # rtpo/*: the level served, the nodes whose returns differ
        reward = got.batch.scalar_reward()
        differ = [float(reward[got.batch.group == g].max() > reward[got.batch.group == g].min()) for g in range(len(counts))]
        assert shown == {"rtpo/level": float(level), "rtpo/informative_nodes": sum(differ) / len(differ)}
        levels.append(level)
        versions.append(version)
        if level == 1:
            break
    assert levels == list(range(levels[0], 0, -1)) and eng.level == 0


def test_appo_branches_continue_after_the_best_scoring_token(policy):
    import copy

    task = build_task({"name": "environment", "env": {"name": "KBLookup-v0"}})
    eng = ENGINES.build({"name": "multi_turn", "tree": {"name": "appo", "branches": 2, "window": 4}}, "engine")
    assert eng.roles() == {"reference"}
    reference = copy.deepcopy(policy)
    with torch.no_grad():
        for p in reference.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    eng.setup(EngineSetup(task, [], 4, task.max_completion_chars + 1, models={"reference": reference}))
    got = eng.rollout(policy, task.examples("train", 2, seed=0), [0, 1], torch.Generator().manual_seed(0))
    b, x = got.batch, got.batch.extras
    roots = sorted(set(x["traj"][x["depth"] == 0].tolist()))
    assert len(roots) == 8 and int((x["depth"] == 1).sum()) > 0
    for root in roots:
        rows = rows_of(x, root)
        branched = [r for r in rows if int(x["branch_token"][r]) > 0]
        assert len(branched) == 1  # one branch point per root episode
        r = branched[0]
        branch, col = int(x["branch"][r]), int(x["branch_token"][r])
        assert all(int(x["branch"][q]) == branch for q in rows if x["step"][q] >= x["step"][r])
        assert all(int(x["branch"][q]) == -1 for q in rows if x["step"][q] < x["step"][r])
        children = sorted(set(x["traj"][(x["branch"] == branch) & (x["depth"] == 1)].tolist()))
        assert len(children) == 2
        for child in children:
            first = rows_of(x, child)[0]
            assert int(b.parent[first]) == root and int(x["step"][first]) == int(x["step"][r])
            assert torch.equal(b.prompt_ids[first], b.prompt_ids[r])  # the same context, replayed
            assert torch.equal(b.response_ids[first, :col], b.response_ids[r, :col])  # tokens ≤ b are copied ...
            assert b.response_mask[first, :col].sum() == 0  # ... and owned by the parent
            assert float(x["branch_scale"][first]) == float(x["branch_scale"][r]) >= 1.0


def test_context_anchors_group_turns_by_the_whole_context(policy):
    _, _, got = played(policy, {"name": "GuessNum-v0"}, G=8, n=2, anchor="context")
    x, turns, group = got.batch.extras, got.turns, got.batch.group.tolist()
    for i in range(len(turns)):
        for j in range(len(turns)):
            same = turns[i].context == turns[j].context and group[i] == group[j]
            assert (int(x["anchor"][i]) == int(x["anchor"][j])) == same
    row_of = {(r.traj, r.step): i for i, r in enumerate(turns)}
    for i, r in enumerate(turns):
        nxt = row_of.get((r.traj, r.step + 1))
        if nxt is not None:
            assert int(x["next_anchor"][i]) == int(x["anchor"][nxt])
        else:
            assert int(x["next_anchor"][i]) == -1


def test_context_hidden_is_the_state_at_the_last_context_token(policy):
    _, _, got = played(policy, {"name": "TextGrid-v0", "obs_mode": "local"}, G=4, n=2)
    b = got.batch
    value = b.extras["context_hidden"]
    assert value.shape == (b.batch_size, policy.hf_model.config.hidden_size)
    for i in (0, b.batch_size - 1):
        ids = b.prompt_ids[i][b.prompt_mask[i].bool()][None]
        with torch.no_grad():
            full = policy.hf_model(input_ids=ids, output_hidden_states=True).hidden_states[-1][0, -1]
        # float32: the batched, left-padded prefill and this lone forward differ by rounding only (~1e-6 here)
        torch.testing.assert_close(value[i], full, atol=1e-4, rtol=0)
