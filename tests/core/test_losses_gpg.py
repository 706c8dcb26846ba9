import torch

from polo.core.losses.gpg import GPG

from .helpers import close
from .zoo_helpers import ratio_batch

ADV = [[0.5], [-0.5], [0.0], [0.0], [0.7]]


def run(loss, rewards, group, adv=ADV):
    logp, batch = ratio_batch([[1.0]] * 5, adv, logp=[[-1.0]] * 5, rewards=rewards, group=group)
    out = loss(logp, batch)
    out.token_loss.sum().backward()
    return out, logp.grad[:, 0]


def test_alpha_rescales_for_groups_with_equal_rewards():
    out, grad = run(GPG(), [1.0, 0.0, 1.0, 1.0, 0.7], [0, 0, 1, 1, 2])  # group 1 silent; singleton group 2 counts
    close(out.metrics["gpg_alpha"], 5 / 3)
    close(out.token_loss[:, 0].detach(), [5 / 6, -5 / 6, 0.0, 0.0, 7 / 6])
    close(grad, [-5 / 6, 5 / 6, 0.0, 0.0, -7 / 6])
    out, grad = run(GPG(alpha_correction=False), [1.0, 0.0, 1.0, 1.0, 0.7], [0, 0, 1, 1, 2])
    close(grad, [-0.5, 0.5, 0.0, 0.0, -0.7])


def test_all_groups_silent_gives_zero_loss():
    out, grad = run(GPG(), [1.0] * 5, [0, 0, 0, 1, 1], adv=[[0.0]] * 5)
    close(out.metrics["gpg_alpha"], 5.0)  # B / max(B − M, 1)
    assert (grad == 0).all() and (out.token_loss == 0).all()


# ---- mutation-testing kills (docs/mutation.md)
def test_alpha_takes_logps_dtype_with_and_without_the_correction():
    out, _ = run(GPG(), [1.0, 0.0, 1.0, 1.0, 0.7], [0, 0, 1, 1, 2])
    assert out.metrics["gpg_alpha"].dtype == torch.float64  # 5/3 in float64
    out, _ = run(GPG(alpha_correction=False), [1.0, 0.0, 1.0, 1.0, 0.7], [0, 0, 1, 1, 2])
    assert out.metrics["gpg_alpha"].item() == 1.0 and out.metrics["gpg_alpha"].dtype == torch.float64
