"""Teacher inputs: one batched teacher-forced forward per prompt variant, sibling choice, top-k supports, the
entropy weights and CoRT's rubric contrast."""
from dataclasses import replace

import pytest
import torch

from polo.core.batch import RolloutBatch
from polo.core.credit.cort import CoRT
from polo.core.distill import with_tail
from polo.core.registry import ConfigError
from polo.policy import TinyModelConfig
from polo.roles.teacher import Teacher
from polo.policy.policy import build_tiny_policy
from polo.engines.base import Rollouts
from polo.inputs.base import PROVIDERS, ProviderContext
from polo.inputs.teacher_inputs import pick_siblings
from polo.tasks.base import reprompt
from polo.tasks.base import Example

SMALL = TinyModelConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64, max_position_embeddings=256)
EXAMPLES = [Example("12+3=", "15"), Example("7+8=", "15")]
# group 0: rows 0-2 (row 1 correct), group 1: rows 3-5 (nobody correct)
COMPLETIONS = ["14", "15", "1", "16", "5", "151"]
CORRECT = [False, True, False, False, False, False]


@pytest.fixture(scope="module")
def policy():
    torch.manual_seed(0)
    return build_tiny_policy(SMALL).eval()


def rollouts(policy, correct=CORRECT):
    examples = [EXAMPLES[0]] * 3 + [EXAMPLES[1]] * 3
    prompt_ids, prompt_mask = policy.encode_prompts(examples)
    response_ids, response_mask = policy.encode_completions(COMPLETIONS)
    batch = RolloutBatch(prompt_ids, prompt_mask, response_ids, response_mask, torch.tensor([0, 0, 0, 1, 1, 1]),
                         torch.tensor(correct, dtype=torch.float32),
                         extras={"correct": torch.tensor(correct)})
    return Rollouts(batch, list(COMPLETIONS), examples)


def context(policy, needs, components=(), seed=0, **settings):
    role = Teacher(**settings)
    models = {"teacher": role.build(policy)}
    return ProviderContext(policy, models, None, None, {f"c{i}": c for i, c in enumerate(components)}, set(needs),
                           generator=torch.Generator().manual_seed(seed))


def provide(ctx, got):
    return PROVIDERS.get(next(iter(ctx.needs)))(ctx, got)


def forward(policy, rollouts_, prompts, rows):
    ids, mask = policy.encode_prompts(prompts)
    b = rollouts_.batch
    return policy.forward_logp(ids, mask, b.response_ids[rows], b.response_mask[rows], return_full=True)


def test_pick_siblings_never_the_row_itself_and_none_without_a_candidate():
    group = torch.tensor([0, 0, 0, 1, 1, 2])
    correct = torch.tensor([True, True, False, False, False, True])
    for seed in range(20):
        index, present = pick_siblings(group, correct, torch.Generator().manual_seed(seed))
        assert present.tolist() == [True, True, True, False, False, False]
        assert index[0] == 1 and index[1] == 0 and index[2] in (0, 1)  # a correct other row of the group
    picks = {int(pick_siblings(group, correct, torch.Generator().manual_seed(s))[0][2]) for s in range(20)}
    assert picks == {0, 1}  # chosen at random among the candidates


def test_plain_variant_is_the_teacher_on_the_students_own_prompt(policy):
    got_rollouts = rollouts(policy)
    ctx = context(policy, {"teacher_logp", "teacher_dist"})
    got = provide(ctx, got_rollouts)
    b = got_rollouts.batch
    expected = policy.forward_logp(b.prompt_ids, b.prompt_mask, b.response_ids, b.response_mask, return_full=True)
    torch.testing.assert_close(got["teacher_logp"], expected["logp"])
    torch.testing.assert_close(got["teacher_dist"], expected["logprobs_full"])
    assert "teacher_dist_ids" not in got and set(got) == {"teacher_logp", "teacher_dist"}


def test_sibling_variant_reprompts_with_a_correct_sibling(policy):
    got_rollouts = rollouts(policy)
    needs = {"teacher_dist_sibling", "sibling_present", "sibling_entropy_weight"}
    got = provide(context(policy, needs), got_rollouts)
    assert got["sibling_present"].tolist() == [1, 0, 1, 0, 0, 0]  # row 1 has no *other* correct row
    template = Teacher().sibling_template
    prompts = [reprompt(EXAMPLES[0], template, solution="15")] * 2
    expected = forward(policy, got_rollouts, prompts, torch.tensor([0, 2]))["logprobs_full"]
    torch.testing.assert_close(got["teacher_dist_sibling"][[0, 2]], expected)
    assert (got["teacher_dist_sibling"][[1, 3, 4, 5]] == 0).all()
    weight, mask = got["sibling_entropy_weight"], got_rollouts.batch.mask
    routed = torch.zeros_like(mask, dtype=torch.bool)
    routed[[0, 2]] = mask[[0, 2]].bool()
    assert (weight[~routed] == 0).all() and (weight[routed] > 0).all()
    torch.testing.assert_close(weight[routed].mean(), torch.tensor(1.0))  # mean 1 over the routed tokens


def test_negative_variant_and_one_forward_per_variant(policy, monkeypatch):
    got_rollouts = rollouts(policy, correct=[False, True, True, False, False, False])
    ctx = context(policy, {"teacher_dist", "teacher_dist_sibling", "sibling_present", "teacher_dist_negative",
                           "negative_present"})
    calls = []
    original = ctx.models["teacher"].forward_logp
    monkeypatch.setattr(ctx.models["teacher"], "forward_logp",
                        lambda *a, **k: calls.append(len(a[0])) or original(*a, **k))
    got = provide(ctx, got_rollouts)
    assert calls == [6, 3, 5]  # plain (every row), sibling (rows 0-2), negative (all but row 0: no other failed row)
    assert got["sibling_present"].tolist() == [1, 1, 1, 0, 0, 0]
    assert got["negative_present"].tolist() == [0, 1, 1, 1, 1, 1]
    prompts = [reprompt(EXAMPLES[0], Teacher().negative_template, solution="14")] * 2
    expected = forward(policy, got_rollouts, prompts, torch.tensor([1, 2]))["logprobs_full"]
    torch.testing.assert_close(got["teacher_dist_negative"][[1, 2]], expected)


def test_top_k_shares_one_support_across_variants(policy):
    got_rollouts = rollouts(policy)
    ctx = context(policy, {"teacher_dist", "teacher_dist_sibling", "sibling_present"}, top_k=5)
    got = provide(ctx, got_rollouts)
    ids = got["teacher_dist_ids"]
    assert got["teacher_dist"].shape == ids.shape == (6, got_rollouts.batch.response_ids.shape[1], 5)
    b = got_rollouts.batch
    full = policy.forward_logp(b.prompt_ids, b.prompt_mask, b.response_ids, b.response_mask,
                               return_full=True)["logprobs_full"]
    torch.testing.assert_close(ids, full.topk(5, -1).indices)  # the plain variant's top-k
    sibling = forward(policy, got_rollouts, [reprompt(EXAMPLES[0], Teacher().sibling_template, solution="15")],
                      torch.tensor([0]))["logprobs_full"]
    torch.testing.assert_close(got["teacher_dist_sibling"][0], sibling[0].gather(-1, ids[0]))
    valid = b.response_mask.bool()
    torch.testing.assert_close(with_tail(got["teacher_dist"])[valid].exp().sum(-1), torch.ones(int(valid.sum())))
    assert provide(context(policy, {"teacher_dist"}, top_k=100), got_rollouts)["teacher_dist"].shape[-1] == 100
    assert "teacher_dist_ids" not in provide(context(policy, {"teacher_dist"}, top_k=100), got_rollouts)


def test_entropy_sharpness_comes_from_the_components(policy):
    from polo.methods.srpo.self_distill import SelfDistill

    got_rollouts = rollouts(policy)
    needs = {"sibling_entropy_weight", "teacher_dist_sibling", "sibling_present"}
    flat = provide(context(policy, needs, components=[SelfDistill(entropy_sharpness=0.0)]), got_rollouts)
    assert set(flat["sibling_entropy_weight"][flat["sibling_entropy_weight"] > 0].tolist()) == {1.0}


def test_rubric_contrast(policy):
    got_rollouts = rollouts(policy)
    rubric = "Digits only."
    got_rollouts.examples = [replace(e, columns={"rubric": rubric}) for e in got_rollouts.examples]
    ctx = ProviderContext(policy, {}, None, None, {"credit": CoRT()}, {"rubric_contrast"})
    got = PROVIDERS.get("rubric_contrast")(ctx, got_rollouts)["rubric_contrast"]
    b = got_rollouts.batch
    rows = torch.arange(6)
    with_rubric = forward(policy, got_rollouts, [reprompt(e, CoRT().rubric_template, rubric=rubric)
                                                 for e in got_rollouts.examples], rows)["logp"]
    plain = policy.forward_logp(b.prompt_ids, b.prompt_mask, b.response_ids, b.response_mask)["logp"]
    torch.testing.assert_close(got, (with_rubric - plain) * b.mask)
    assert got.abs().sum() > 0


def test_rubric_contrast_without_a_rubric_is_a_clear_error_unless_a_default_is_set(policy):
    got_rollouts = rollouts(policy)
    ctx = ProviderContext(policy, {}, None, None, {"credit": CoRT()}, {"rubric_contrast"})
    with pytest.raises(ConfigError, match="'rubric' column.*'12\\+3='"):
        PROVIDERS.get("rubric_contrast")(ctx, got_rollouts)
    ctx.components["credit"] = CoRT(default_rubric="Digits only.")
    assert PROVIDERS.get("rubric_contrast")(ctx, got_rollouts)["rubric_contrast"].shape == (6, 4)


def test_reprompt_rewrites_the_last_chat_message():
    example = Example("q", "a", messages=({"role": "system", "content": "be brief"}, {"role": "user", "content": "q"}))
    out = reprompt(example, "{prompt} (hint: {solution})", solution="42")
    assert out.prompt == "q (hint: 42)" and out.messages[-1]["content"] == "q (hint: 42)"
    assert out.messages[0] == example.messages[0] and example.messages[-1]["content"] == "q"
