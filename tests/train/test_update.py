"""The updater: rows with all-zero advantages skip the forward/backward without changing the update."""
import pytest
import torch

from polo.core.batch import RolloutBatch
from polo.train.config import load_recipe
from polo.train.trainer import Trainer
from polo.train.update import group_minibatches, micro_batches


def make_trainer(tmp_path, tiny, name, *extra):
    return Trainer(load_recipe("grpo", [*tiny, "train.minibatches=2", *extra]), tmp_path / name, log=lambda *a: None)


def scored_batch(trainer, zero_groups):
    """4 prompts × 4 samples of random responses; the advantages of groups in ``zero_groups`` are 0."""
    policy = trainer.policy
    prompt_ids, prompt_mask = policy.encode_prompts([p for p in ["1+2=", "13+4=", "5+60=", "7+7="] for _ in range(4)])
    g = torch.Generator().manual_seed(0)
    response_ids = torch.randint(3, 20, (16, 4), generator=g)
    response_mask = (torch.arange(4) < torch.randint(1, 5, (16, 1), generator=g)).long()
    group = torch.arange(4).repeat_interleave(4)
    with torch.no_grad():
        old = policy.forward_logp(prompt_ids, prompt_mask, response_ids, response_mask)["logp"]
    advantages = torch.randn(16, 1, generator=g) * response_mask
    advantages[torch.isin(group, torch.tensor(zero_groups))] = 0.0
    return RolloutBatch(prompt_ids, prompt_mask, response_ids, response_mask, group, torch.zeros(16),
                        old_logp=old + 0.05 * torch.randn(16, 4, generator=g) * response_mask,
                        advantages=advantages)


def recording_steps(updater) -> list[torch.Tensor]:
    """The flattened gradient of each optimizer step ``updater`` takes (the step itself still happens)."""
    grads, step = [], updater.optimizer_step
    updater.optimizer_step = lambda factor: grads.append(torch.cat([p.grad.reshape(-1) for p in updater.params])) \
        or step(factor)
    return grads


@pytest.mark.parametrize("zero_groups", [[1, 3], [0, 1, 2, 3]])
def test_skipping_zero_advantage_rows_gives_the_same_update(tmp_path, tiny, zero_groups, f32):
    skipping, full = make_trainer(tmp_path, tiny, "a"), make_trainer(tmp_path, tiny, "b")
    assert all(torch.equal(a, b) for a, b in zip(skipping.updater.params, full.updater.params))
    batch = scored_batch(skipping, zero_groups)
    seen = []
    backward = skipping.updater.policy_backward
    skipping.updater.policy_backward = lambda micro, *a: seen.append(micro.batch_size) or backward(micro, *a)
    skipped_grads, full_grads = recording_steps(skipping.updater), recording_steps(full.updater)
    skipping.updater.run(batch)
    assert sum(seen) == 16 - 4 * len(zero_groups)  # the zero-advantage groups never reached the model
    full.updater.settings.skip_zero_advantage_rows = False
    full.updater.run(batch)
    fresh = make_trainer(tmp_path, tiny, "c").updater.params
    moved = any(not torch.equal(p, q) for p, q in zip(skipping.updater.params, fresh))
    assert moved == (len(zero_groups) < 4)
    # the same gradient at each optimizer step: float32 sums over the 16 rows in another grouping differ by a
    # few ulps of the largest gradient element times √16 (compared before Adam, which magnifies tiny elements)
    assert len(skipped_grads) == len(full_grads) == 2
    for a, b in zip(skipped_grads, full_grads):
        torch.testing.assert_close(a, b, atol=f32.atol(b.abs().max(), 16), rtol=0)
    for a, b in zip(skipping.optimizer.state.values(), full.optimizer.state.values()):
        torch.testing.assert_close(a["exp_avg_sq"], b["exp_avg_sq"], atol=1e-9, rtol=1e-4)


def test_rows_are_not_skipped_when_another_term_needs_them(tmp_path, tiny, monkeypatch):
    trainer = make_trainer(tmp_path, tiny, "a", "entropy_coef=0.01")
    seen = []
    backward = trainer.updater.policy_backward
    monkeypatch.setattr(trainer.updater, "policy_backward",
                        lambda micro, *a: seen.append(micro.batch_size) or backward(micro, *a))
    trainer.updater.run(scored_batch(trainer, [0, 1]))
    assert sum(seen) == 16


@pytest.mark.parametrize("n", [1, 2, 3, 5, 9])
def test_group_minibatches_keep_groups_whole_and_cover_every_row_once(n):
    group = torch.tensor([7, 7, 2, 2, 2, 9, 9, 4, 4, 4, 1])  # uneven groups, arbitrary ids
    minibatches = group_minibatches(group, n, torch.Generator().manual_seed(0))
    rows = torch.cat(minibatches)
    assert sorted(rows.tolist()) == list(range(len(group)))
    assert len(minibatches) == min(n, 5)
    seen = [set(group[m].tolist()) for m in minibatches]
    assert all(a.isdisjoint(b) for i, a in enumerate(seen) for b in seen[i + 1:])
    sizes = [len(s) for s in seen]
    assert max(sizes) - min(sizes) <= 1


def test_micro_batches_cut_on_group_boundaries():
    group = torch.tensor([0, 0, 0, 0, 5, 5, 5, 5, 2, 2, 2, 2])
    assert [m.tolist() for m in micro_batches(group, 8, whole_groups=True)] == [list(range(8)), [8, 9, 10, 11]]
    assert [len(m) for m in micro_batches(group, 3)] == [3, 3, 3, 3]  # plain slicing splits groups
    uneven = torch.tensor([1, 1, 1, 4, 4, 7, 7, 7, 7])  # every group lands whole where it starts
    parts = micro_batches(uneven, 4, whole_groups=True)
    assert torch.equal(torch.cat(parts), torch.arange(9))
    assert all(len(set(uneven[p].tolist()) & set(uneven[q].tolist())) == 0 for i, p in enumerate(parts) for q in parts[i + 1:])
