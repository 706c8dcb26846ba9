import math

from polo.core.losses.dro import DRO

from .helpers import close
from .zoo_helpers import ratio_batch


def test_quadratic_penalty_around_the_sampling_policy():
    logp, batch = ratio_batch([math.exp(0.5), 1.0], [1.0, -1.0], logp=[-1.0, -2.0])
    out = DRO()(logp, batch)
    close(out.token_loss[0].detach(), [1.0 + 0.5 * 0.05 * 0.25, -2.0])
    out.token_loss.sum().backward()
    close(logp.grad[0], [-1.0 + 0.05 * 0.5, 1.0])  # −A + β·(logp − old_logp)
    close(out.metrics["log_ratio_sq"], 0.125)


# ---- mutation-testing kills (docs/mutation.md)
def test_ratio_mean_metric():
    logp, batch = ratio_batch([math.exp(0.5), 1.0], [1.0, -1.0], logp=[-1.0, -2.0])
    close(DRO()(logp, batch).metrics["ratio_mean"], (math.exp(0.5) + 1) / 2)  # 1.3244
