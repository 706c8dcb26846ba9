"""Packed rows (polo.policy.packing): the same log-probs, entropies, gradients and values as padded rows."""
import pytest
import torch

from polo.core.registry import ConfigError
from polo.policy import TinyModelConfig, ValueModel
from polo.policy import packing, prefix
from polo.policy.packing import PackedRows, assign_rows, reads_of
from polo.policy.policy import build_tiny_policy
from polo.tasks import build_task
from polo.train.config import load_recipe
from polo.train.trainer import load_policy

SMALL = TinyModelConfig(hidden_size=32, num_heads=2, intermediate_size=64)


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def policy(request):
    """In float64, as every test comparing two paths through the model (Float32 in conftest): the paths then agree
    to ~1e-13 and their float32 results differ only by the float32 steps after the model."""
    torch.manual_seed(0)
    return build_tiny_policy(SMALL.model_copy(update={"arch": request.param})).double()


def batch(policy, rows=12, width=7):
    """Prompts of 3 lengths, each 4 times; responses of 0 … ``width`` tokens with masked-out tokens inside."""
    p_ids, p_mask = policy.encode_prompts([p for p in ["2+3=", "17+25=", "a"] for _ in range(4)][:rows])
    g = torch.Generator().manual_seed(1)
    r_ids = torch.randint(3, 40, (rows, width), generator=g)
    r_mask = (torch.arange(width) < torch.randint(0, width + 1, (rows, 1), generator=g)).long()
    r_mask[:, 1] = 0  # a tool token inside a response: context, not trained
    return p_ids, p_mask, r_ids, r_mask


def both(module, fn):
    """``fn()`` with ``module.pack_rows`` False (padded, prompt sharing), then True (packed)."""
    out = []
    for pack in (False, True):
        module.pack_rows = pack
        out.append(fn())
    module.pack_rows = "auto"
    return out


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_packed_logp_and_entropy_equal_padded(policy, f32, temperature):
    p_ids, p_mask, r_ids, r_mask = batch(policy)
    padded, packed = both(policy, lambda: policy.forward_logp(p_ids, p_mask, r_ids, r_mask, temperature=temperature,
                                                               return_entropy=True))
    # float64 logits ~1e-13 apart cast to float32 (equal or 1 ulp apart), then the same float32 log-softmax: a few
    # ulps of max|z| + ln V plus √V ulps for its sum of V exponentials (f32.logp_atol). The entropy, logsumexp(z) −
    # Σ p·z, is built from the same terms and magnitudes, so the same bound holds for it.
    atol = f32.logp_atol(policy, p_ids, p_mask, r_ids, r_mask, temperature)
    torch.testing.assert_close(packed["logp"], padded["logp"], atol=atol, rtol=0)
    torch.testing.assert_close(packed["entropy"], padded["entropy"], atol=atol, rtol=0)
    assert bool((packed["logp"][r_mask == 0] == 0).all()) and bool((packed["logp"][r_mask == 1] != 0).all())


def test_packed_gradients_equal_padded(policy, f32):
    p_ids, p_mask, r_ids, r_mask = batch(policy)
    params = list(policy.parameters())
    weights = torch.randn(r_ids.shape, generator=torch.Generator().manual_seed(2))

    def grads():
        logp = policy.forward_logp(p_ids, p_mask, r_ids, r_mask)["logp"]
        return torch.autograd.grad((logp * weights).sum(), params)

    padded, packed = both(policy, grads)
    # the float32 log-softmax backward of equal or 1-ulp-apart logits gives upstream gradients a few ulps apart; a
    # weight's gradient sums them over every token position: a few ulps of max|g| times √positions
    positions = p_ids.numel() + r_ids.numel()
    for a, b in zip(padded, packed):
        torch.testing.assert_close(b, a, atol=f32.atol(a.abs().max(), positions), rtol=0)


def test_packed_single_row_and_one_row_layout(policy, f32, monkeypatch):
    p_ids, p_mask, r_ids, r_mask = (x[1:2] for x in batch(policy))
    r_mask[:, 0] = 1
    padded, packed = both(policy, lambda: policy.forward_logp(p_ids, p_mask, r_ids, r_mask)["logp"])
    atol = f32.logp_atol(policy, p_ids, p_mask, r_ids, r_mask)
    torch.testing.assert_close(packed, padded, atol=atol, rtol=0)
    # a varlen kernel's layout (all sequences in one row), here through SDPA's block-diagonal mask
    monkeypatch.setattr(prefix, "varlen_attention", lambda model: True)
    p_ids, p_mask, r_ids, r_mask = batch(policy)
    padded, packed = both(policy, lambda: policy.forward_logp(p_ids, p_mask, r_ids, r_mask)["logp"])
    torch.testing.assert_close(packed, padded, atol=f32.logp_atol(policy, p_ids, p_mask, r_ids, r_mask), rtol=0)


def test_packed_critic_values_equal_padded(policy, f32):
    p_ids, p_mask, r_ids, r_mask = batch(policy)
    critic = ValueModel.from_policy(policy)
    torch.nn.init.normal_(critic.head.weight)
    padded, packed = both(critic, lambda: critic(p_ids, p_mask, r_ids, r_mask))
    # float64 values ~1e-13 apart cast to float32: equal or 1 ulp apart; a few ulps of max|V|
    torch.testing.assert_close(packed, padded, atol=f32.atol(padded.abs().max()), rtol=0)


def test_auto_packs_where_it_computes_fewer_positions(policy, monkeypatch):
    calls, read = [], PackedRows.read
    monkeypatch.setattr(PackedRows, "read", lambda self, *args: calls.append(self) or read(self, *args))
    p_ids, p_mask, r_ids, r_mask = batch(policy, width=40)
    r_mask[:, 20:] = 0
    r_mask[0, 20:] = 1  # one row runs to the width: the others' padding outweighs 3 prompts computed 4 times
    policy.forward_logp(p_ids, p_mask, r_ids, r_mask)
    assert len(calls) == 1
    policy.forward_logp(p_ids, p_mask, r_ids[:, :2], r_mask[:, :2])  # short responses: prompt sharing wins
    assert len(calls) == 1


def test_layout_packs_each_sequence_contiguously_with_restarting_positions():
    prompt, reads = torch.tensor([3, 1, 2, 3, 2]), torch.tensor([4, 2, 0, 1, 5])  # sizes 6, 2, 0, 3, 6
    layout = PackedRows.plan(prompt, reads, one_row=False)
    assert layout.width == 6 and layout.rows == 3  # ⌈17 / 6⌉ = 3 rows of the longest sequence
    prompt_ids = torch.arange(1, 16).view(5, 3) * 100
    continuation = torch.arange(1, 21).view(5, 4)
    got = layout.inputs(prompt_ids, continuation)
    ids, position = got["input_ids"].flatten(), got["position_ids"].flatten()
    for b, size in enumerate(layout.sizes.tolist()):
        span = slice(int(layout.start[b]), int(layout.start[b]) + size)
        expected = [*prompt_ids[b, 3 - prompt[b]:].tolist(), *continuation[b].tolist()][:size]
        assert ids[span].tolist() == expected and position[span].tolist() == list(range(size))
    out = torch.arange(layout.positions, dtype=torch.float64).view(layout.rows, layout.width, 1)
    unpacked = layout.unpack(out, 5).squeeze(-1)  # each read output is its flat position
    assert unpacked[0].tolist() == [int(layout.start[0]) + 2 + j for j in range(4)] + [0]
    assert unpacked[2].tolist() == [0] * 5


def test_assign_rows_fits_every_row_and_beats_one_per_row():
    sizes = torch.randint(1, 100, (200,), generator=torch.Generator().manual_seed(0))
    row, rows = assign_rows(sizes, 100)
    sums = torch.zeros(rows, dtype=sizes.dtype).scatter_add_(0, row, sizes)
    assert int(sums.max()) <= 100 and rows < 200 and set(row.tolist()) == set(range(rows))
    assert rows <= 1.1 * int(sizes.sum()) / 100 + 1  # within 10 % of the bound on these uniform sizes


def test_reads_and_bad_values():
    assert reads_of(torch.tensor([[1, 0, 1, 0], [0, 0, 0, 0], [1, 1, 1, 1]])).tolist() == [3, 0, 4]
    with pytest.raises(ValueError, match="row 1 has no prompt token"):
        PackedRows.plan(torch.tensor([2, 0]), torch.tensor([1, 1]), one_row=False)
    with pytest.raises(ValueError, match="pack='yes'"):
        prefix.read_after_prompt(None, torch.ones(1, 1, dtype=torch.long), torch.ones(1, 1), torch.ones(1, 1),
                                 lambda out: out, lm_head=True, pack="yes")


def test_train_pack_rows_reaches_the_policy_and_its_critic(tmp_path):
    build_tiny_policy(SMALL).save(tmp_path)
    recipe = load_recipe("grpo", [f"model.path={tmp_path}", "train.pack_rows=false"])
    policy = load_policy(recipe, build_task(recipe.task), ["1+2="], log=lambda _: None)
    assert policy.pack_rows is False and ValueModel.from_policy(policy).pack_rows is False
    assert load_recipe("grpo", []).train.pack_rows == "auto"
    with pytest.raises(ConfigError, match="train.pack_rows"):
        load_recipe("grpo", ["train.pack_rows=sometimes"])


def test_varlen_attention_reads_the_model_config():
    config = type("Config", (), {"_attn_implementation": "flash_attention_2"})
    assert packing.varlen_attention(type("Model", (), {"config": config})())
    config._attn_implementation = "sdpa"
    assert not packing.varlen_attention(type("Model", (), {"config": config})())
