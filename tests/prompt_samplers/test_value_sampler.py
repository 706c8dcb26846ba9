"""VSPO's value_resample sampler: the task value, the refill by highest value, the pass-rate EMA and its state."""
import pytest
import torch
from pydantic import ValidationError

from polo.methods.vspo.sampler import ValueResample, task_value
from test_prompt_samplers import G, fake_generate, stream


def test_task_value_worked_example():
    p = torch.tensor([0.0, 0.25, 0.5, 0.875, 1.0], dtype=torch.float64)
    torch.testing.assert_close(1 - p, torch.tensor([1, 0.75, 0.5, 0.125, 0], dtype=torch.float64))
    torch.testing.assert_close(4 * p * (1 - p), torch.tensor([0, 0.75, 1, 0.4375, 0], dtype=torch.float64))
    torch.testing.assert_close(task_value(p, 0.5), torch.tensor([0.5, 0.75, 0.75, 0.2812, 0], dtype=torch.float64),
                               atol=1e-4, rtol=0)


def sampler_with(pass_rate, **settings):
    sampler = ValueResample(**settings)
    sampler.load_state_dict({"pass_rate": torch.tensor(pass_rate, dtype=torch.float64)})
    return sampler


def test_constant_groups_are_refilled_with_the_highest_value_prompts():
    first = stream(16).next(2)[1]  # the stream's first two prompts, all-equal below
    a, b, c = [i for i in range(16) if i not in first][:3]
    table = {i: [1.0, 1.0] for i in range(16)}
    table[a], table[b], table[c] = [1.0, 0.0], [0.0, 1.0], [1.0, 0.0]
    pass_rate = [1.0] * 16
    pass_rate[a], pass_rate[b], pass_rate[c] = 0.875, 0.5, 0.0  # v = 0.28, 0.75, 0.5
    pass_rate[first[0]] = 0.5  # highest value, but already in the batch: not a candidate
    sampler = sampler_with(pass_rate)
    generate, calls = fake_generate(table)
    got, metrics = sampler.collect(stream(16), generate, 2, torch.Generator().manual_seed(0), {})
    assert calls == [first, [b, c]]
    assert got.batch.extras["prompt_index"].tolist() == [b] * G + [c] * G
    assert torch.equal(got.batch.group, torch.arange(2).repeat_interleave(G))
    assert metrics["sampler/resample_rounds"] == 1 and metrics["sampler/groups"] == 2
    assert metrics["sampler/kept_frac"] == 0.5 and metrics["sampler/refill_value"] == pytest.approx(0.625)
    rate = sampler.state_dict()["pass_rate"]
    # EMA at rate 0.5: first[0] 0.5 -> 0.75 (pass 1), b 0.5 -> 0.5, c 0 -> 0.25, a untouched
    assert rate[first[0]] == 0.75 and rate[b] == 0.5 and rate[c] == 0.25 and rate[a] == 0.875


def test_unseen_prompts_are_valued_at_the_prior_and_set_by_their_first_group():
    table = {i: [1.0, 1.0] for i in range(8)}
    sampler = ValueResample(max_resample_rounds=1)
    generate, calls = fake_generate(table)
    sampler.collect(stream(8), generate, 2, torch.Generator().manual_seed(0), {})
    seen = calls[0] + calls[1]
    assert len(set(seen)) == 4  # the refill took unseen prompts (v 0.75) over the solved ones (v 0)
    rate = sampler.state_dict()["pass_rate"]
    assert rate[seen].tolist() == [1.0] * 4 and rate.isnan().sum() == 4


def test_no_refill_rounds_and_nothing_kept_trains_on_the_first_round():
    generate, calls = fake_generate({i: [0.0, 0.0] for i in range(8)})
    got, metrics = ValueResample(max_resample_rounds=0).collect(stream(8), generate, 3, torch.Generator(), {})
    assert len(calls) == 1 and got.batch.batch_size == 3 * G
    assert metrics["sampler/groups"] == 0 and metrics["sampler/resample_rounds"] == 0


def test_refill_stops_when_the_pool_is_used_up():
    generate, calls = fake_generate({i: [0.0, 0.0] for i in range(4)})
    _, metrics = ValueResample(max_resample_rounds=5).collect(stream(4), generate, 3, torch.Generator(), {})
    assert [len(c) for c in calls] == [3, 1] and metrics["sampler/resample_rounds"] == 1


def test_signal_correct_keeps_groups_whose_verdicts_differ():
    generate, _ = fake_generate({i: [1.0, 0.0] for i in range(4)})
    got, _ = ValueResample(signal="correct").collect(stream(4), generate, 2, torch.Generator(), {})
    assert got.batch.batch_size == 2 * G


def test_state_round_trip_gives_the_same_next_batch():
    table = {i: ([1.0, 0.0] if i % 3 == 0 else [1.0, 1.0]) for i in range(24)}
    one = ValueResample()
    generate, _ = fake_generate(table)
    s, gen = stream(24), torch.Generator().manual_seed(3)
    one.collect(s, generate, 4, gen, {})
    two = ValueResample()
    two.load_state_dict(one.state_dict())
    s2 = stream(24)
    s2.load_state_dict(s.state_dict())
    gen2 = torch.Generator()
    gen2.set_state(gen.get_state())
    a, ma = one.collect(s, generate, 4, gen, {})
    b, mb = two.collect(s2, generate, 4, gen2, {})
    assert ma == mb and torch.equal(a.batch.extras["prompt_index"], b.batch.extras["prompt_index"])
    assert torch.equal(one.state_dict()["pass_rate"].nan_to_num(-1), two.state_dict()["pass_rate"].nan_to_num(-1))


def test_bad_settings_and_a_table_of_another_pool_are_refused():
    with pytest.raises(ValidationError, match="difficulty_weight"):
        ValueResample(difficulty_weight=1.5)
    with pytest.raises(ValidationError, match="ema"):
        ValueResample(ema=0.0)
    with pytest.raises(ValidationError, match="max_resample_rounds"):
        ValueResample(max_resample_rounds=-1)
    generate, _ = fake_generate({i: [1.0, 0.0] for i in range(8)})
    with pytest.raises(ValueError, match="table has 5 prompts but the training pool has 8"):
        sampler_with([0.5] * 5).collect(stream(8), generate, 2, torch.Generator(), {})
