from polo.core.advantages.gpg import GPG

from .helpers import close, seq_adv


def test_gpg_rescales_by_the_fraction_of_samples_with_signal():
    rewards, group = [1.0, 0.0, 0.0, 0.0, 1.0, 1.0], [0, 0, 1, 1, 2, 2]  # only group 0 is mixed
    close(seq_adv(GPG(), rewards, group), [3 * 0.5, -3 * 0.5, 0, 0, 0, 0])  # α = 6/2
    close(seq_adv(GPG(valid="nonzero_reward"), rewards, group), [1.0, -1.0, 0, 0, 0, 0])  # α = 6/3 (verl)
    close(seq_adv(GPG(f_norm=2.0), rewards, group), [0.75, -0.75, 0, 0, 0, 0])


def test_gpg_singleton_counts_as_signal_and_all_equal_batch_is_zero():
    close(seq_adv(GPG(), [0.5, 1.0, 0.0], [7, 3, 3]), [0.5, 0.5, -0.5])  # α = 3/3
    assert seq_adv(GPG(), [1.0, 1.0, 0.0, 0.0], [0, 0, 1, 1]).abs().max() == 0


# ---- mutation-testing kills (docs/mutation.md)
def test_gpg_nonzero_reward_counts_every_nonzero_reward_and_one_sample_suffices():
    # rewards [1, 0 | 1, 0.5]: 3 non-zero → α = 4/3; centred [0.5, −0.5 | 0.25, −0.25]
    close(seq_adv(GPG(valid="nonzero_reward"), [1.0, 0.0, 1.0, 0.5], [0, 0, 1, 1]), [2 / 3, -2 / 3, 1 / 3, -1 / 3])
    close(seq_adv(GPG(valid="nonzero_reward"), [1.0, 0.0], [0, 0]), [1.0, -1.0])  # M = 1: α = 2/1
