"""RGPO's ``guided_nll``: the NLL of the answers the guided engine kept, over their tokens only."""
import torch

from polo.core.registry import REGULARIZERS

from .helpers import build_batch, close


def test_scope_is_the_guided_rows_and_the_nll_their_token_mean():
    batch = build_batch([0.0, 0.0, 0.0], mask=torch.tensor([[1, 1], [1, 0], [1, 1]]))
    batch.extras["guided"] = torch.tensor([1.0, 1.0, 0.0])
    logp = torch.tensor([[-1.0, -2.0], [-4.0, -9.0], [-5.0, -5.0]], dtype=torch.float64)
    reg = REGULARIZERS.build("guided_nll")
    close(reg.scope(batch), [[1.0, 1.0], [1.0, 0.0], [0.0, 0.0]])
    out = reg(logp, batch)
    close(out.token_loss, -logp)  # −log π on every token; the scope picks the guided ones
    close(out.metrics["nll"], (1.0 + 2.0 + 4.0) / 3)
    assert out.metrics["guided_tokens"] == 3 and reg.coef == 0.001 and reg.needs() == {"guided"}


# ---- mutation-testing kills
def test_scope_takes_the_masks_dtype():
    batch = build_batch([0.0, 0.0], mask=torch.ones(2, 1))
    batch.rewards = batch.rewards.float()  # mask float32
    batch.extras["guided"] = torch.tensor([1.0, 0.0], dtype=torch.float64)
    scope = REGULARIZERS.build("guided_nll").scope(batch)
    assert scope.dtype == torch.float32 and scope.tolist() == [[1.0], [0.0]]
