"""The span_tag / span_rewards and element inputs: character spans mapped onto char and BPE tokens."""
from types import SimpleNamespace

import pytest
import torch
from transformers import AutoTokenizer

from polo.core.batch import RolloutBatch
from polo.core.registry import ConfigError
from polo.policy.tokenizer import build_char_tokenizer
from polo.methods.p2tpo.inputs import element_inputs
from polo.engines.base import Rollouts
from polo.inputs.base import PROVIDERS, ProviderContext
from polo.inputs.span_inputs import tagged_spans
from polo.tasks.base import Example
from polo.tasks.registry import build_task
from polo.tasks.slate_rank import ndcg

SLATE = Example("a3b7c1d9e4f8g2h5>5:", "S:bdf|R:dfb", {"relevant": "bdf"})
FIELDS = Example("c:dog a:17 b:xy>", "a=71;b=yx;c=god")


def rollouts_of(tokenizer, texts, example, task):
    """Rows whose responses are ``texts`` + EOS, right-padded, as the single_turn engine writes them."""
    ids = [tokenizer(t, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id] for t in texts]
    T = max(map(len, ids)) + 1
    pad = tokenizer.pad_token_id
    N = len(texts)
    batch = RolloutBatch(prompt_ids=torch.ones(N, 1, dtype=torch.long), prompt_mask=torch.ones(N, 1, dtype=torch.long),
                         response_ids=torch.tensor([i + [pad] * (T - len(i)) for i in ids]),
                         response_mask=torch.tensor([[1] * len(i) + [0] * (T - len(i)) for i in ids]),
                         group=torch.zeros(N, dtype=torch.long), rewards=torch.zeros(N, 1))
    ctx = ProviderContext(policy=SimpleNamespace(tokenizer=tokenizer), models={}, engine=None, task=task,
                          components={}, needs=set())
    return ctx, Rollouts(batch, list(texts), [example] * N), ids


def char_text(tokenizer, ids, tags, tag):
    """The text of the tokens tagged ``tag``."""
    return tokenizer.decode([i for i, t in zip(ids, tags) if t == tag])


@pytest.fixture(scope="module")
def bpe(chat_checkpoint):
    return AutoTokenizer.from_pretrained(chat_checkpoint(), local_files_only=True)


@pytest.mark.parametrize("kind", ["char", "bpe"])
def test_span_tags_follow_the_phases(kind, request):
    tokenizer = build_char_tokenizer() if kind == "char" else request.getfixturevalue("bpe")
    task = build_task({"name": "slate_rank"})
    texts = ["S:bdfa|R:db", "S:bd|R:", "zz"]
    ctx, rollouts, ids = rollouts_of(tokenizer, texts, SLATE, task)
    assert PROVIDERS.get("span_tag").fn is tagged_spans and PROVIDERS.get("span_rewards").fn is tagged_spans
    out = tagged_spans(ctx, rollouts)
    tag = out["span_tag"]
    for row, text in enumerate(texts):
        n = len(ids[row])
        row_tags = tag[row, :n].tolist()
        assert row_tags[-1] == -1 and tag[row, n:].eq(-1).all()  # EOS and padding: no phase
        cut = text.find("|")
        slate = char_text(tokenizer, ids[row], row_tags, 0)
        rank = char_text(tokenizer, ids[row], row_tags, 1)
        if kind == "char":
            assert (slate, rank) == ((text[:cut], text[cut:]) if cut >= 0 else (text, ""))
        else:  # a BPE token straddling the cut belongs to the phase it opens (the later one)
            assert slate + rank == text and text.startswith(slate) and (cut < 0 or "|" in rank)
    expected = [[1.0, ndcg("db", {*"bdf"}, 3)], [2 / 3, 0.0], [-0.5, -0.5]]  # "zz": malformed
    torch.testing.assert_close(out["span_rewards"], torch.tensor(expected))
    assert ctx.metrics["spans/unmapped_rows"] == 0


@pytest.mark.parametrize("kind", ["char", "bpe"])
def test_element_inputs(kind, request):
    tokenizer = build_char_tokenizer() if kind == "char" else request.getfixturevalue("bpe")
    task = build_task({"name": "fields"})
    texts = ["a=71;c=gxd", "a=71;b=yx;c=god"]
    ctx, rollouts, ids = rollouts_of(tokenizer, texts, FIELDS, task)
    out = element_inputs(ctx, rollouts)
    torch.testing.assert_close(out["element_quality"], torch.tensor([[1.0, 0.0, 2 / 3], [1.0, 1.0, 1.0]]))
    span, label, boundary = out["element_span"], out["element_label"], out["element_boundary"]
    for e, block in enumerate(["a=71", None, "c=gxd"]):
        s, t = span[0, e].tolist()
        if block is None:
            assert s == t == 0 and boundary[0, e] >= 0
            assert tokenizer.decode(ids[0][boundary[0, e]:]).startswith("c")  # where b should have started
        else:
            assert block in tokenizer.decode(ids[0][s:t]) and boundary[0, e] == -1
    errors = [c for c in range(len(ids[0])) if label[0, c] == 0]
    assert len(errors) == 1 and "x" in tokenizer.decode([ids[0][errors[0]]])
    assert label[1].le(1).all() and not label[1].eq(0).any() and boundary[1].eq(-1).all()
    if kind == "char":
        assert span[0].tolist() == [[0, 4], [0, 0], [5, 10]] and boundary[0].tolist() == [-1, 5, -1]
        assert label[0, :11].tolist() == [1, 1, 1, 1, -1, 1, 1, 1, 0, 1, -1]  # ";" and EOS outside; "x" error


def test_missing_element_at_the_end_is_charged_to_eos_and_tasks_without_a_parser():
    tokenizer = build_char_tokenizer()
    ctx, rollouts, ids = rollouts_of(tokenizer, ["a=71", ""], FIELDS, build_task({"name": "fields"}))
    out = element_inputs(ctx, rollouts)
    assert out["element_boundary"].tolist() == [[-1, 4, 4], [0, 0, 0]]  # the EOS columns
    ctx.task = build_task({"name": "addition"})
    with pytest.raises(ConfigError, match="element_report"):
        element_inputs(ctx, rollouts)
    with pytest.raises(ConfigError, match="tagged_spans"):
        tagged_spans(ctx, rollouts)
