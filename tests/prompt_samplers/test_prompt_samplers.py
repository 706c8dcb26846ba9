"""Prompt samplers: dynamic sampling keeps signal-carrying groups and refills; SPO draws by priority."""
import torch

from polo.core.batch import RolloutBatch, concat_batches
from polo.tasks.base import Example
from polo.engines.base import Rollouts
from polo.prompt_samplers.base import DynamicSampling, SPOPriority, Uniform
from polo.train.data import PromptStream

G = 2


def fake_generate(rewards_by_prompt):
    """generate(examples, indices) whose group rewards are looked up by prompt index."""
    calls = []

    def generate(examples, indices):
        calls.append(list(indices))
        rewards = torch.tensor([r for i in indices for r in rewards_by_prompt[i]], dtype=torch.float32)
        B = len(rewards)
        batch = RolloutBatch(
            prompt_ids=torch.ones(B, 2, dtype=torch.long), prompt_mask=torch.ones(B, 2),
            response_ids=torch.ones(B, 3, dtype=torch.long), response_mask=torch.ones(B, 3),
            group=torch.arange(len(indices)).repeat_interleave(G), rewards=rewards, old_logp=torch.zeros(B, 3),
            extras={"correct": rewards.clone(), "prompt_index": torch.tensor(indices).repeat_interleave(G)},
        )
        return Rollouts(batch, ["x"] * B, [e for e in examples for _ in range(G)])

    return generate, calls


def stream(n):
    return PromptStream([Example(str(i), str(i)) for i in range(n)], seed=0)


def test_uniform_keeps_everything():
    generate, _ = fake_generate({i: [1.0, 1.0] for i in range(8)})
    got, _ = Uniform().collect(stream(8), generate, 4, torch.Generator(), {})
    assert got.batch.batch_size == 8


def test_dynamic_sampling_keeps_mixed_groups_and_refills():
    # prompts 0..3 are mixed, the rest all-equal
    table = {i: ([1.0, 0.0] if i < 4 else [1.0, 1.0] if i % 2 else [0.0, 0.0]) for i in range(16)}
    generate, calls = fake_generate(table)
    got, metrics = DynamicSampling(max_rounds=10).collect(stream(16), generate, 3, torch.Generator(), {})
    kept = got.batch.extras["prompt_index"].tolist()
    assert len(kept) == 3 * G and all(i < 4 for i in kept)
    assert metrics["sampler/groups"] == 3 and metrics["sampler/rounds"] == len(calls) >= 1
    # groups stay distinct and consecutive after concatenation
    assert torch.equal(got.batch.group, torch.arange(3).repeat_interleave(G))


def test_dynamic_sampling_gives_up_after_max_rounds():
    generate, calls = fake_generate({i: [1.0, 1.0] for i in range(16)})
    got, metrics = DynamicSampling(max_rounds=2).collect(stream(16), generate, 4, torch.Generator(), {})
    assert len(calls) == 2 and metrics["sampler/groups"] == 0
    assert got.batch.batch_size == 4 * G  # trains on the last round (zero advantages)


def test_not_all_correct_filter_keeps_all_wrong_groups():
    table = {0: [1.0, 1.0], 1: [0.0, 0.0], 2: [1.0, 0.0], 3: [1.0, 1.0]}
    generate, _ = fake_generate(table)
    got, _ = DynamicSampling(filter="not_all_correct", max_rounds=1).collect(stream(4), generate, 4,
                                                                              torch.Generator(), {})
    assert sorted(set(got.batch.extras["prompt_index"].tolist())) == [1, 2]


def test_spo_priority_draws_by_tracker_weights():
    class Tracker:
        registry_name = "spo_tracker"

        def sampling_weights(self, index):
            return (index == 5).double() + 1e-9

    generate, calls = fake_generate({i: [1.0, 0.0] for i in range(8)})
    SPOPriority(candidates=8.0).collect(stream(8), generate, 1, torch.Generator().manual_seed(0),
                                        {"advantage": Tracker()})
    assert calls == [[5]]


def test_concat_batches_pads_and_offsets_groups():
    a = RolloutBatch(prompt_ids=torch.ones(2, 3, dtype=torch.long), prompt_mask=torch.ones(2, 3),
                     response_ids=torch.ones(2, 2, dtype=torch.long), response_mask=torch.ones(2, 2),
                     group=torch.tensor([0, 0]), rewards=torch.tensor([1.0, 0.0]))
    b = RolloutBatch(prompt_ids=torch.ones(1, 4, dtype=torch.long), prompt_mask=torch.ones(1, 4),
                     response_ids=torch.ones(1, 5, dtype=torch.long), response_mask=torch.ones(1, 5),
                     group=torch.tensor([0]), rewards=torch.tensor([1.0]))
    c = concat_batches([a, b])
    assert c.prompt_mask.tolist()[0] == [0, 1, 1, 1]  # prompts stay left-padded
    assert c.response_mask.tolist()[0] == [1, 1, 0, 0, 0]  # responses stay right-padded
    assert c.group.tolist() == [0, 0, 1]
    assert c.turn.tolist()[0] == [0, 0, -1, -1, -1]
