"""The policy's stand-ins for IAPO's influence graph and HiMPO's hindsight relevance (polo.inputs.oracle_probes),
on constructed KBLookup episodes: a stand-in policy whose action depends on a shown observation gives an edge,
one that ignores it none; the estimators read the probe inputs when the recipe names ``probe``."""
from types import SimpleNamespace

import pytest
import torch
from pydantic import ValidationError

from polo.core.advantages.himpo import HiMPO
from polo.core.advantages.iapo import IAPO
from polo.core.advantages.step_inputs import step_input
from polo.engines.base import ENGINES, EngineSetup
from polo.engines.episodes import TurnRecord
from polo.envs import render_context
from polo.inputs.base import PROVIDERS, ProviderContext
from polo.inputs.oracle_probes import edge_agreement, hindsight_relevance, influence_edges, observation_influence
from polo.policy.inputs import pad_sequences
from polo.policy.policy import build_tiny_policy
from polo.policy.tiny import TinyModelConfig
from polo.tasks import build_task
from tests.core.helpers import build_batch


class KeyPolicy:
    """Char-level stand-in for a policy: every action token has log-prob −2 per one of ``keys`` the prompt does
    not show (0 when it shows them all). An action that depends on an observation holding a key gains 2 nats
    per token from it."""

    device = torch.device("cpu")
    pad_token_id = 0

    def __init__(self, *keys: str):
        self.keys = keys

    @staticmethod
    def tokenizer(text, add_special_tokens=False):
        return {"input_ids": [ord(c) for c in text]}

    def encode_prompts(self, prompts):
        return pad_sequences([[ord(c) for c in getattr(p, "prompt", p)] for p in prompts], 0, left=True)

    def forward_logp(self, ids, mask, response_ids, response_mask):
        texts = ["".join(map(chr, row[m.bool()].tolist())) for row, m in zip(ids, mask)]
        missing = torch.tensor([sum(key not in t for key in self.keys) for t in texts], dtype=torch.float32)
        return {"logp": -2.0 * missing[:, None] * response_mask}


def scripted(env_config: dict, seed: int, actions: list[str], traj: int = 0):
    """The task, and the TurnRecords of playing ``actions`` from ``seed`` with the task's own rendering."""
    task = build_task({"name": "environment", "env": env_config})
    env = task.make_env()
    env.reset(seed)
    history, records = [], []
    for step, action in enumerate(actions):
        context = task.context(env, history)
        result = env.step(action)
        history.append((action, result.observation))
        records.append(TurnRecord(traj, step, context, action, result.observation, result.reward, result.info, seed,
                                  env.prompt, env.gold, env.probe_prefix, result.terminated, result.truncated))
    return task, records


def rollouts_of(records, policy=None):
    """A Rollouts stand-in: the records and their actions as response tokens (``policy``'s, with eos; without
    one, char ids)."""
    if policy is not None:
        ids, mask = policy.encode_completions([r.action for r in records])
    else:
        ids, mask = pad_sequences([[ord(c) for c in r.action] for r in records], 0, left=False)
    return SimpleNamespace(turns=records, batch=SimpleNamespace(response_ids=ids, response_mask=mask))


def provider_context(task, policy, **components):
    engine = ENGINES.build({"name": "multi_turn"}, "engine")
    engine.setup(EngineSetup(task, [], 1, task.max_completion_chars + 1))
    return ProviderContext(policy, {}, engine, task, components, set())


# KBLookup seed 0: "q: city of temi?"; s:temi -> "temi: f=peva c=ash p=dog"; a:ash -> done (spec's golden episode)
GOLDEN = ["s:temi", "a:ash"]


def test_an_action_that_depends_on_an_observation_gets_a_support_edge_and_one_that_does_not_gets_none():
    task, records = scripted({"name": "KBLookup-v0"}, 0, GOLDEN)
    uses = KeyPolicy("c=ash")  # the answer is likely only once the search result shows the city
    ctx = provider_context(task, uses, advantage=IAPO(influence="probe"))
    got = influence_edges(ctx, rollouts_of(records))
    assert got["probe_uses_support"].tolist() == [0, 0b1] and got["probe_uses_failed"].tolist() == [0, 0]
    assert ctx.metrics["iapo/probe_edge_frac"] == 1.0
    ignores = KeyPolicy("q: city")  # the question is always shown: the observation changes nothing
    got = influence_edges(provider_context(task, ignores, advantage=IAPO(influence="probe")), rollouts_of(records))
    assert got["probe_uses_support"].tolist() == [0, 0] and got["probe_uses_failed"].tolist() == [0, 0]


def test_the_threshold_separates_weak_from_strong_influence():
    task, records = scripted({"name": "KBLookup-v0"}, 0, GOLDEN)
    # KeyPolicy's influence is exactly 2 nats per token: an edge below that threshold, none above it
    for threshold, bits in ((1.9, [0, 1]), (2.1, [0, 0])):
        iapo = IAPO(influence="probe", influence_threshold=threshold)
        ctx = provider_context(task, KeyPolicy("c=ash"), advantage=iapo)
        assert influence_edges(ctx, rollouts_of(records))["probe_uses_support"].tolist() == bits


def test_an_observation_of_a_failed_step_gives_a_failed_use_edge():
    # seed 0: "hello" is invalid (observation "invalid"), then s:temi, then a:ash. The search depends on the
    # invalid step's observation under this policy: a failed-use edge 0 -> 1 (and 0 -> 2, still shown).
    task, records = scripted({"name": "KBLookup-v0"}, 0, ["hello", *GOLDEN])
    assert not records[0].info["valid"]
    got = influence_edges(provider_context(task, KeyPolicy("invalid"), advantage=IAPO(influence="probe")),
                          rollouts_of(records))
    assert got["probe_uses_failed"].tolist() == [0, 0b1, 0b1] and got["probe_uses_support"].tolist() == [0, 0, 0]


def test_the_probe_rows_are_checked_step_inputs_that_iapo_reads():
    task, records = scripted({"name": "KBLookup-v0"}, 0, GOLDEN)
    got = influence_edges(provider_context(task, KeyPolicy("c=ash"), advantage=IAPO(influence="probe")),
                          rollouts_of(records))
    N = len(records)
    batch = build_batch([1.0] * N)
    batch.extras.update(traj=torch.zeros(N, dtype=torch.long), step=torch.arange(N), tool_error=torch.zeros(N), **got)
    for name in got:
        assert got[name].dtype == torch.int64 and step_input(batch, name, "test").shape == (N,)
    assert IAPO(influence="probe").needs() == {"traj", "step", "tool_error", "probe_uses_support", "probe_uses_failed"}
    # a one-trajectory group: A = 0, so only the graph's reach shows: both turns reach the answer
    out = IAPO(influence="probe")(batch)
    assert out.diagnostics["iapo/reach_frac"] == 1.0
    with pytest.raises(ValueError, match="uses_support"):
        IAPO(influence="oracle")(batch)  # the oracle's inputs are not there: the source decides what is read


def test_the_influence_is_the_mean_action_log_likelihood_ratio_of_the_real_and_masked_context(f32):
    torch.manual_seed(0)
    policy = build_tiny_policy(TinyModelConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64,
                                               max_position_embeddings=256)).double()
    task, records = scripted({"name": "KBLookup-v0"}, 0, ["s:temi", "s:peva", "a:ash"])
    ro = rollouts_of(records, policy)
    with torch.no_grad():
        pairs, influence = observation_influence(provider_context(task, policy), ro, records)
    assert pairs == [(1, 0), (2, 0), (2, 1)]
    history = [(r.action, r.observation) for r in records]
    for (t, j), value in zip(pairs, influence):
        masked = [(a, ("none" + "e" * 99)[: len(o)] if s == j else o) for s, (a, o) in enumerate(history[:t])]
        contexts = [render_context(records[0].prompt, h) + "|" for h in (history[:t], masked)]
        assert contexts[0] == records[t].context
        ids, mask = policy.encode_prompts(contexts)
        resp = ro.batch.response_ids[[t, t]], ro.batch.response_mask[[t, t]]
        with torch.no_grad():
            logp = policy.forward_logp(ids, mask, *resp)["logp"]
        expected = (logp[0] - logp[1]).sum() / resp[1][0].sum()
        # a float32 sum of 2T log-probs (float64 model, float32 outputs) on either side
        tol = f32.atol(float(logp.abs().max()), 2 * resp[1].shape[1])
        assert float(value) == pytest.approx(float(expected), abs=tol)


class CountingPolicy(KeyPolicy):
    """KeyPolicy that records the number of sequences of each forward."""

    def __init__(self, key):
        super().__init__(key)
        self.calls = []

    def forward_logp(self, ids, mask, response_ids, response_mask):
        self.calls.append(len(ids))
        return super().forward_logp(ids, mask, response_ids, response_mask)


def test_an_observation_out_of_the_window_or_equal_to_the_placeholder_is_not_probed():
    # seed 1: "s:zzzz" -> "none" (already the placeholder); with history_window 1 turn 0 is hidden from turn 2
    task, records = scripted({"name": "KBLookup-v0"}, 1, ["s:zzzz", "s:kazo", "s:pepe"])
    task = task.model_copy(update={"history_window": 1})
    env = task.make_env()
    env.reset(1)
    records[2].context = task.context(env, [(r.action, r.observation) for r in records[:2]])
    policy = CountingPolicy("kazo:")
    pairs, influence = observation_influence(provider_context(task, policy), rollouts_of(records), records)
    assert pairs == [(1, 0), (2, 0), (2, 1)] and influence.tolist() == [0.0, 0.0, 2.0]
    assert policy.calls == [2]  # only turn 2's real context and its context with o_1 masked


def test_a_context_that_is_not_the_rendered_history_or_a_missing_turn_is_refused():
    task, records = scripted({"name": "KBLookup-v0"}, 0, GOLDEN)
    records[1].context = "something else|"
    with pytest.raises(ValueError, match="not the engine's rendering of its history"):
        influence_edges(provider_context(task, KeyPolicy("x")), rollouts_of(records))
    task, records = scripted({"name": "KBLookup-v0"}, 0, GOLDEN)
    with pytest.raises(ValueError, match="none for turns \\[0\\]"):
        influence_edges(provider_context(task, KeyPolicy("x")), rollouts_of(records[1:]))


def test_bad_source_config_is_refused_naming_the_value():
    with pytest.raises(ValidationError, match="influence"):
        IAPO(influence="judge")
    with pytest.raises(ValidationError, match="greater than 0"):
        IAPO(influence="probe", influence_threshold=0.0)
    with pytest.raises(ValidationError, match="relevance"):
        HiMPO(relevance="words")


def test_edge_agreement_and_kappa():
    probe = torch.tensor([1, 1, 0, 0, 2, 0])
    assert edge_agreement(probe, probe) == (1.0, 1.0)
    agreement, kappa = edge_agreement(probe, torch.tensor([1, 0, 0, 1, 0, 0]))
    # agree on 0, 2, 5: 1/2; chance = (2·2 + 3·4 + 1·0)/36 = 4/9; kappa = (1/2 − 4/9)/(5/9) = 0.1
    assert agreement == 0.5 and kappa == pytest.approx(0.1, abs=1e-12)
    assert edge_agreement(torch.zeros(3, dtype=torch.long), torch.zeros(3, dtype=torch.long)) == (1.0, 0.0)


# KBLookup memory variant, seed 0: search, write the answer's evidence, answer
MEMORY = {"name": "KBLookup-v0", "memory": True, "max_turns": 5}


def test_hindsight_relevance_is_the_share_of_the_final_actions_surprisal_the_write_removed():
    task, records = scripted(MEMORY, 0, ["s:temi", "m:temi c=ash", "a:ash"])
    ctx = provider_context(task, KeyPolicy("c=ash"), advantage=HiMPO(relevance="probe"))
    # the final action "a:ash" goes from -2 to 0 nats per token once the memory shows "c=ash": all surprisal removed
    assert hindsight_relevance(ctx, rollouts_of(records))["probe_relevance"].tolist() == [0.0, 1.0, 0.0]
    assert ctx.metrics["himpo/probe_relevance_mean"] == 1.0
    task, records = scripted(MEMORY, 0, ["s:temi", "m:temi p=dog", "a:ash"])
    got = hindsight_relevance(provider_context(task, KeyPolicy("c=ash")), rollouts_of(records))["probe_relevance"]
    assert got.tolist() == [0.0, 0.0, 0.0]  # a write the final action does not depend on is irrelevant
    task, records = scripted(MEMORY, 0, ["s:temi", "m:temi c=ash"])
    got = hindsight_relevance(provider_context(task, KeyPolicy("c=ash")), rollouts_of(records))["probe_relevance"]
    assert got.tolist() == [0.0, 0.0]  # nothing followed the write
    task, records = scripted(MEMORY, 0, ["s:temi", "m:c=ash", "a:ash"])
    got = hindsight_relevance(provider_context(task, KeyPolicy("c=ash", "temi c=ash")), rollouts_of(records))
    # before: both keys missing, -4 nats per token; after: one, -2: half of the surprisal removed
    assert got["probe_relevance"].tolist() == [0.0, 0.5, 0.0]


def test_an_environment_that_renders_its_own_context_is_refused_before_any_work():
    memory = build_task({"name": "environment", "env": MEMORY})
    assert "plain_history is False" in PROVIDERS.get("probe_uses_support").check(memory)
    plain = build_task({"name": "environment", "env": {"name": "KBLookup-v0"}})
    assert PROVIDERS.get("probe_uses_support").check(plain) is None


def test_himpo_reads_the_relevance_of_its_source():
    assert HiMPO(relevance="probe").needs() == {"traj", "step", "memory_write", "memory_utility", "probe_relevance"}
    assert HiMPO().needs() == {"traj", "step", "memory_write", "memory_utility", "memory_relevance"}
    assert PROVIDERS.get("probe_relevance") is not PROVIDERS.get("probe_uses_support")
