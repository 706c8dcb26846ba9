"""Chat models as agents: tool calls through the chat template (``tools=``), the trained tokens of a turn cut to the
action the environment received, and the context's token budget (polo.engines.actions, polo.engines.tool_calls,
polo.envs.tools, polo.tasks.agent_context)."""
import json
import re

import pytest
import torch

from polo.core.registry import ConfigError
from polo.engines.base import ENGINES, EngineSetup
from polo.engines.tool_calls import parse_reply
from polo.envs import make, render_context
from polo.envs.tools import ToolAction, tool_schemas
from polo.policy import Policy
from polo.policy.policy import build_tiny_policy
from polo.policy.sampling import SampleOutput
from polo.policy.tiny import TinyModelConfig
from polo.tasks import build_task
from polo.tasks.agent_context import ContextFit, lay_out, omitted_line
from polo.train.warm_start import task_knobs

TOOL_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n<tools>{% for tool in tools %}\n{{ tool | tojson }}{% endfor %}\n</tools>\n"
    "Call one as <tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call><|im_end|>\n{% endif %}"
    "{% for m in messages %}"
    "{% if m.role == 'assistant' and m.tool_calls %}<|im_start|>assistant\n{% if m.content %}{{ m.content }}\n"
    "{% endif %}{% for c in m.tool_calls %}<tool_call>\n"
    "{{ {'name': c.function.name, 'arguments': c.function.arguments} | tojson }}\n</tool_call>{% endfor %}"
    "<|im_end|>\n"
    "{% elif m.role == 'tool' %}<|im_start|>user\n<tool_response name=\"{{ m.name }}\" id=\"{{ m.tool_call_id }}\">\n"
    "{{ m.content }}\n</tool_response><|im_end|>\n"
    "{% else %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""A Qwen2.5-style template: the tool schemas in a system turn, calls as Hermes ``<tool_call>`` JSON, results as
``<tool_response>`` user turns."""


@pytest.fixture(scope="module")
def tool_policy(chat_checkpoint):
    policy = Policy.load(chat_checkpoint(4096), chat_template=True)  # byte-level schemas: ~1 token a character
    policy.tokenizer.chat_template = TOOL_TEMPLATE
    return policy


def engine_for(task_config, G, max_new_tokens):
    task = build_task({"name": "environment", **task_config})
    eng = ENGINES.build({"name": "multi_turn"}, "engine")
    eng.setup(EngineSetup(task, [], G, max_new_tokens))
    return task, eng


def script(eng, policy, reply, run_on_after=None):
    """Replace the engine's sampler by scripted replies: ``reply(call, row)`` is row ``row``'s text at decoding call
    ``call``, tokenized and followed by the end token (log-probs -1); a reply holding ``run_on_after`` has no end
    token and is ``truncated``, as when the sampler runs on to ``max_new_tokens`` after a stop string. Returns the
    list of the replies given, in row order (the rollout's rows are in decoding order)."""
    given, calls = [], []

    def generate(_policy, prompt_ids, prompt_mask, **_):
        k = len(calls)
        calls.append(prompt_ids)
        texts = [reply(k, b) for b in range(prompt_ids.shape[0])]
        given.extend(texts)
        run_on = [run_on_after is not None and run_on_after in t for t in texts]
        seqs = [policy.tokenizer(t, add_special_tokens=False)["input_ids"] + [policy.eos_token_id] * (not cut)
                for t, cut in zip(texts, run_on)]
        T = max(map(len, seqs))
        ids = torch.tensor([s + [policy.pad_token_id] * (T - len(s)) for s in seqs])
        mask = torch.tensor([[1] * len(s) + [0] * (T - len(s)) for s in seqs])
        B = len(seqs)
        return SampleOutput(ids, mask, -mask.float(), torch.tensor(run_on), None,
                            torch.zeros(B, policy.hf_model.config.hidden_size))

    object.__setattr__(eng, "generate", generate)
    return given


def trained_text(policy, batch, row):
    ids = batch.response_ids[row][batch.response_mask[row].bool()].tolist()
    return policy.tokenizer.decode(ids, skip_special_tokens=True)


def test_the_trained_tokens_are_the_action_the_environment_received_built_in_model():
    torch.manual_seed(0)
    policy = build_tiny_policy(TinyModelConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64,
                                               max_position_embeddings=256))
    task, eng = engine_for({"env": {"name": "GuessNum-v0"}}, G=6, max_new_tokens=8)
    replies = ["c?;>4?", "  =7 ", ";c?", "=3", ">8?;;x", "c? ;=2"]
    given = script(eng, policy, lambda k, b: replies[(k + b) % 6], run_on_after=";")
    got = eng.rollout(policy, task.examples("train", 1, seed=0), [0], torch.Generator().manual_seed(0))
    expected = {"c?;>4?": "c?", "  =7 ": "=7", ";c?": "", "=3": "=3", ">8?;;x": ">8?", "c? ;=2": "c?"}
    assert set(given) == set(replies)
    for r, turn in enumerate(got.turns):
        assert turn.action == expected[given[r]]
        text = trained_text(policy, got.batch, r)
        if turn.action:  # one character per token: exactly the action
            assert text == turn.action
        else:  # an empty action is trained up to the stop string that ended it
            assert text == ";"
        eos = got.batch.response_ids[r] == policy.eos_token_id
        ended_by_eos = ";" not in given[r]
        assert bool((got.batch.response_mask[r].bool() & eos).any()) == ended_by_eos  # the end token: only then
        assert (got.batch.old_logp[r] == -got.batch.response_mask[r].float()).all()  # cut tokens: log-prob 0
    assert not got.batch.truncated.any()  # the sampler ran on after ";", but the action had ended there


def test_the_trained_tokens_are_the_action_the_environment_received_chat_checkpoint(chat_checkpoint):
    policy = Policy.load(chat_checkpoint(1024), chat_template=True)
    task, eng = engine_for({"env": {"name": "GuessNum-v0"}}, G=3, max_new_tokens=8)
    replies = ["c?;the fox", "=7", ">5?;"]
    given = script(eng, policy, lambda k, b: replies[(k + b) % 3])
    got = eng.rollout(policy, task.examples("train", 1, seed=0), [0], torch.Generator().manual_seed(0))
    for r, turn in enumerate(got.turns):
        assert turn.action == given[r].split(";")[0]
        assert trained_text(policy, got.batch, r) == turn.action
    cut = [r for r in range(len(given)) if ";" in given[r]]
    sampled = [len(policy.tokenizer(given[r])["input_ids"]) + 1 for r in cut]
    assert cut
    assert all(int(got.batch.response_mask[r].sum()) < n for r, n in zip(cut, sampled))


def test_hermes_replies_are_parsed_into_one_call():
    text = 'I search.\n<tool_call>\n{"name": "search", "arguments": {"name": "temi"}}\n</tool_call> more'
    call = parse_reply(text)
    assert call.call == ("search", {"name": "temi"}) and call.message["content"] == "I search."
    assert call.end == len(text) - len(" more")  # what follows the call is not read
    assert parse_reply('<tool_call>{"name": "answer", "arguments": "{\\"value\\": \\"ash\\"}"}</tool_call>').call == (
        "answer", {"value": "ash"})
    for bad in ("s:temi", "<tool_call>{\"name\": \"search\"", "<tool_call>[1]</tool_call>",
                "<tool_call>{\"arguments\": {}}</tool_call>",
                "<tool_call>{\"name\": \"a\", \"arguments\": 3}</tool_call>"):
        assert parse_reply(bad).call is None and parse_reply(bad).end == len(bad)


def test_environment_tools_are_documented_functions_that_give_action_text():
    env = make({"name": "KBLookup-v0", "memory": True})
    schemas = tool_schemas(env.tools())
    assert [s["function"]["name"] for s in schemas] == ["search", "answer", "note"]
    assert schemas[0]["function"]["parameters"]["required"] == ["name"]
    assert env.tool_action("search", {"name": "temi"}) == "s:temi"
    assert env.tool_action("search", {"who": "temi"}) is None and env.tool_action("fly", {}) is None
    action = ToolAction("s:temi", {"role": "assistant", "content": ""})
    assert action == "s:temi" and hash(action) == hash("s:temi")
    assert make({"name": "GuessNum-v0"}).tools() == []


def test_a_chat_checkpoint_calls_kblookup_tools_through_its_template(tool_policy):
    task, eng = engine_for({"env": {"name": "KBLookup-v0", "p_two_hop": 0.0}}, G=2, max_new_tokens=64)
    example = task.examples("train", 1, seed=0)[0]
    env = task.make_env()
    env.reset(example.columns["seed"])
    subject, gold = env.expert().removeprefix("s:"), env.gold
    search = f'<tool_call>\n{{"name": "search", "arguments": {{"name": "{subject}"}}}}\n</tool_call>'
    answer = f'<tool_call>{{"name": "answer", "arguments": "{{\\"value\\": \\"{gold}\\"}}"}}</tool_call>'
    replies = [[search + " then more", search], ["hello", "<tool_call>{\"name\": \"fly\"}</tool_call>"],
               [answer, answer]]
    script(eng, tool_policy, lambda k, b: replies[k][b])
    got = eng.rollout(tool_policy, [example], [0], torch.Generator().manual_seed(0))
    b = got.batch
    by = {(t.traj, t.step): r for r, t in enumerate(got.turns)}
    for traj in (0, 1):
        turns = [got.turns[by[traj, s]] for s in range(3)]
        assert [t.action for t in turns] == [f"s:{subject}", "", f"a:{gold}"]  # an unparseable reply: ""
        assert turns[1].observation == "invalid" and turns[2].observation == "done"
        assert turns[0].context.tools == tool_schemas(env.tools())
        prompts = [tool_policy.tokenizer.decode(b.prompt_ids[by[traj, s]][b.prompt_mask[by[traj, s]].bool()])
                   for s in range(3)]
        assert all(json.dumps(s) in p for s in tool_schemas(env.tools()) for p in prompts)  # the schema, every turn
        call = {"name": "search", "arguments": {"name": subject}}
        shown = (f"<|im_start|>assistant\n<tool_call>\n{json.dumps(call)}\n</tool_call><|im_end|>\n<|im_start|>user\n"
                 f'<tool_response name="search" id="call00000">\n{turns[0].observation}\n</tool_response>')
        assert shown in prompts[1] and shown in prompts[2]  # the call, then its result as the tool's message
        bad = replies[1][traj]
        assert f"<|im_start|>assistant\n{bad}<|im_end|>\n<|im_start|>user\ninvalid<|im_end|>" in prompts[2]
        # the trained tokens are the reply up to the end of its call; an unparseable reply is trained whole
        assert trained_text(tool_policy, b, by[traj, 0]) == search
        assert trained_text(tool_policy, b, by[traj, 1]) == bad
        assert trained_text(tool_policy, b, by[traj, 2]) == answer
    eos = tool_policy.eos_token_id
    first = by[0, 0]  # text after the call: neither it nor the end token is trained
    assert not (b.response_mask[first].bool() & (b.response_ids[first] == eos)).any()
    assert (b.response_mask[by[1, 0]].bool() & (b.response_ids[by[1, 0]] == eos)).any()
    assert got.turns[by[0, 2]].info["valid"] and b.extras["correct"].bool().all()


def test_a_chat_checkpoint_samples_replies_with_the_schema_in_its_prompt(tool_policy):
    task, eng = engine_for({"env": {"name": "KBLookup-v0"}}, G=2, max_new_tokens=16)
    got = eng.rollout(tool_policy, task.examples("train", 1, seed=1), [0], torch.Generator().manual_seed(0))
    prompt = tool_policy.tokenizer.decode(got.batch.prompt_ids[0][got.batch.prompt_mask[0].bool()])
    assert '"name": "search"' in prompt and '"name": "answer"' in prompt
    for r, turn in enumerate(got.turns):  # the untrained model writes no call: every action is the invalid ""
        assert turn.action == "" and not turn.info["valid"]
        assert int(got.batch.response_mask[r].sum()) > 0


def test_a_template_that_ignores_tools_is_refused(chat_checkpoint):
    policy = Policy.load(chat_checkpoint(1024), chat_template=True)  # the fixture's template renders no tools
    task, eng = engine_for({"env": {"name": "KBLookup-v0"}}, G=1, max_new_tokens=16)
    with pytest.raises(ConfigError, match="chat template renders no tools"):
        eng.rollout(policy, task.examples("train", 1, seed=1), [0], torch.Generator().manual_seed(0))


def tiny_policy(positions):
    torch.manual_seed(0)
    return build_tiny_policy(TinyModelConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64,
                                             max_position_embeddings=positions))


def test_the_budget_keeps_the_first_observation_and_the_newest_turns_that_fit():
    config = {"env": {"name": "TextGrid-v0", "obs_mode": "global", "max_steps": 12}, "history_window": 12}
    task, eng = engine_for({**config, "context_tokens": "model"}, G=4, max_new_tokens=2)
    policy = tiny_policy(80)  # 78 tokens of context: the first observation and about 4 turns
    script(eng, policy, lambda k, b: "nsew"[(k + b) % 4])
    got = eng.rollout(policy, task.examples("train", 2, seed=0), [0, 1], torch.Generator().manual_seed(0))
    dropped = 0
    for r, turn in enumerate(got.turns):
        assert int(got.batch.prompt_mask[r].sum()) + 2 <= 80  # every context fits the positions minus the action
        history = [(t.action, t.observation) for t in got.turns if t.traj == turn.traj and t.step < turn.step]
        match = re.search(r"\[(\d+) earlier turns? omitted\]", turn.context)
        omitted = int(match.group(1)) if match else 0
        head = f"{turn.prompt}|{omitted_line(omitted)}" if omitted else turn.prompt
        assert turn.context == render_context(head, history, turn.step - omitted) + "|"  # the newest turns
        if omitted:
            dropped += 1
            assert omitted < turn.step  # the newest turn is always kept
            fewer = f"{turn.prompt}|{omitted_line(omitted - 1)}" if omitted > 1 else turn.prompt
            one_more = render_context(fewer, history, turn.step - omitted + 1) + "|"
            assert len(policy.tokenizer(one_more)["input_ids"]) > 78  # and no more turns would have fitted
    assert dropped > 0
    plain = build_task({"name": "environment", **config})  # without a budget: the window's rendering, unchanged
    env = plain.make_env()
    env.reset(0)
    history = [("n", "r0c1 g:r3c2")] * 6
    assert plain.context(env, history, fit=eng._fit) == env.render(history, 12) + "|"


def test_the_chat_budget_notes_the_dropped_turns_in_the_first_message(chat_checkpoint):
    policy = Policy.load(chat_checkpoint(1024), chat_template=True)
    env = make({"name": "GuessNum-v0"})
    env.reset(0)
    history = [("c?", "u: small"), (">3?", "u: yes"), (">5?", "u: no"), ("=4", "u: wrong")]
    fit = ContextFit(lambda c: int(policy.encode_prompts([c])[0].shape[1]), 1024, 8)
    budget = fit.count(lay_out(env, history, 2, True, "", note=True))
    task = build_task({"name": "environment", "env": {"name": "GuessNum-v0"}, "history_window": 6,
                       "context_tokens": budget})
    context = task.context(env, history, chat=True, fit=fit)
    assert fit.count(context) <= budget < fit.count(task.context(env, history, chat=True))
    assert context.messages[0] == {"role": "user", "content": f"{env.prompt}\n[2 earlier turns omitted]"}
    assert [(m["role"], m["content"]) for m in context.messages[1:]] == [
        ("assistant", ">5?"), ("tool", "u: no"), ("assistant", "=4"), ("tool", "u: wrong")]


def test_a_turn_that_alone_exceeds_the_context_is_refused_in_one_line():
    task, eng = engine_for({"env": {"name": "KBLookup-v0"}, "context_tokens": "model"}, G=1, max_new_tokens=4)
    example = task.examples("train", 1, seed=0)[0]
    env = task.make_env()
    env.reset(example.columns["seed"])
    first = len(tiny_policy(64).tokenizer(env.prompt + "|")["input_ids"])
    policy = tiny_policy(first + 4 + 2)  # the first observation fits; with a search result it does not
    script(eng, policy, lambda k, b: env.expert())
    with pytest.raises(ConfigError) as err:
        eng.rollout(policy, [example], [0], torch.Generator().manual_seed(0))
    message = str(err.value)
    assert "\n" not in message and re.search(r"turn 1 needs \d+ tokens with only the first observation and its "
                                             rf"newest turn kept, over the limit of {first + 2} ", message)


def test_the_budget_knob_keeps_the_warm_start_key_of_recipes_that_do_not_set_it():
    plain = task_knobs({"name": "environment", "env": {"name": "TextGrid-v0"}})
    assert "context_tokens" not in plain
    assert task_knobs({"name": "environment", "env": {"name": "TextGrid-v0"}, "context_tokens": 96})[
        "context_tokens"] == 96


RESPONSE_TEMPLATE = {
    "defaults": {"role": "assistant"},
    "start_anchor": "<|im_start|>assistant\n",
    "fields": {"tool_calls": {"open": "<tool_call>", "close": "</tool_call>", "repeats": True, "content": "json",
                              "transform": {"type": "function", "function": "{content}"}},
               "content": {"close": "<|im_end|>", "content": "text"}},
}
"""A transformers response template for TOOL_TEMPLATE's replies (the format of the Response Parsing guide)."""


def test_a_tokenizer_with_a_response_template_reads_the_reply_itself(chat_checkpoint):
    policy = Policy.load(chat_checkpoint(4096), chat_template=True)
    policy.tokenizer.chat_template, policy.tokenizer.response_template = TOOL_TEMPLATE, RESPONSE_TEMPLATE
    task, eng = engine_for({"env": {"name": "KBLookup-v0", "max_turns": 2}}, G=2, max_new_tokens=64)
    search = '<tool_call>\n{"name": "search", "arguments": {"name": "kamo"}}\n</tool_call> and more'
    given = script(eng, policy, lambda k, b: [search, '<tool_call>{"name": "search"</tool_call>'][b])
    got = eng.rollout(policy, task.examples("train", 1, seed=0), [0], torch.Generator().manual_seed(0))
    for r, turn in enumerate(got.turns):
        assert turn.action == ("s:kamo" if given[r] == search else "")  # bad JSON: unparseable
        assert trained_text(policy, got.batch, r) == given[r]  # the template's parse reads the whole reply
