"""Task slate_rank: recall / NDCG@k (spec §11 worked example), parsing, phases, demonstrations."""
import pytest

from polo.tasks.registry import build_task
from polo.tasks.slate_rank import f1, ndcg, recall


def test_worked_example_metrics():
    rel = {"c2", "c5"}
    assert recall(["c1", "c2", "c3"], rel) == pytest.approx(0.5)
    assert ndcg(["c2", "c1"], rel, 2) == pytest.approx(0.6131, abs=1e-4)
    assert ndcg(["c5", "c2"], rel, 2) == pytest.approx(1.0)
    assert ndcg(["c1", "c3"], rel, 2) == 0.0
    assert f1(["c1", "c2", "c3"], rel) == pytest.approx(0.4)  # precision 1/3, recall 1/2


def test_demonstrations_are_correct_and_score_one():
    task = build_task({"name": "slate_rank"})
    for ex in task.examples("train", 50, 0):
        demo = task.demonstration(ex)
        assert task.is_correct(demo, ex)
        assert task.phase_scores(demo, ex.columns["relevant"]) == (1.0, 1.0)
        assert len(demo) <= task.max_completion_chars
    train, test = ({e.prompt for e in task.examples(split, 50, 0)} for split in ("train", "test"))
    assert not train & test


def test_rewards_phases_and_format_penalty():
    task = build_task({"name": "slate_rank", "rank_k": 2, "format_penalty": 0.5})
    ex = task.examples("train", 1, 3)[0]
    rel = ex.columns["relevant"]
    others = [c for c in "abcdefgh" if c not in rel]
    text = f"S:{rel[0]}{others[0]}|R:{others[0]}{rel[0]}"
    spans = task.tagged_spans(text, ex)
    assert spans.spans == [(0, 0, 4), (1, 4, len(text))]  # "S:xy" | "|R:yx": the opener in the phase it opens
    assert spans.scores[0] == pytest.approx(1 / len(rel))
    assert spans.scores[1] == pytest.approx(ndcg([others[0], rel[0]], set(rel), 2))
    assert task.task_rewards()["slate"]([ex.prompt], [text], [rel]) == [spans.scores[0]]
    for bad in ("S:aa|R:a", "S:ab|R:c", "S:ab|R:abc", "S:az|R:", "ab", "S:ab|R:a|"):
        assert task.phase_scores(bad, rel) == (-0.5, -0.5), bad
    assert task.tagged_spans("abc", ex).spans == [(0, 0, 3)]  # no "|": all slate
    assert build_task({"name": "slate_rank", "slate_metric": "f1"}).phase_scores(f"S:{rel}{others[0]}|R:", rel)[0] \
        == pytest.approx(2 * len(rel) / (2 * len(rel) + 1))


def test_bad_knobs_are_named():
    with pytest.raises(ValueError, match="rank_k"):
        build_task({"name": "slate_rank", "rank_k": 6})
    with pytest.raises(ValueError, match="slate_metric"):
        build_task({"name": "slate_rank", "slate_metric": "ndcg"})
