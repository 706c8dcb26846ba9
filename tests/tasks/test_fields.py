"""Task fields: quality, the key aligner, error labels and missing-element boundaries."""
import pytest

from polo.tasks.base import Example
from polo.tasks.fields import levenshtein, value_errors, value_quality
from polo.tasks.registry import build_task

EX = Example("c:dog a:17 b:xy>", "a=71;b=yx;c=god")


def test_edit_distance_and_quality():
    assert levenshtein("kitten", "sitting") == 3 and levenshtein("", "ab") == 2
    assert value_quality("god", "god") == 1.0 and value_quality("", "") == 1.0
    assert value_quality("gd", "god") == pytest.approx(2 / 3)
    assert value_quality("", "god") == 0.0


def test_value_error_labels():
    # value written from char 5 ("=" at 4): a replaced char, an extra char, an omission (marks the char before)
    assert value_errors("gxd", "god", 5) == [6]
    assert value_errors("gold", "god", 5) == [7]
    assert value_errors("gd", "god", 5) == [5]
    assert value_errors("od", "god", 5) == [4]  # omission at the start: the "=" is marked


def test_report_aligns_by_key_and_finds_boundaries():
    task = build_task({"name": "fields"})
    got = task.element_report("a=71;c=gxd", EX)
    assert got.quality == [1.0, 0.0, pytest.approx(2 / 3)]
    assert got.blocks == [(0, 4), None, (5, 10)]
    assert got.errors == [8]
    assert got.boundary == [None, 5, None]  # b should have started where c's block starts
    got = task.element_report("c=god;zz;a=71;a=00", EX)  # out of order, unknown block, repeated key
    assert got.quality == [1.0, 0.0, 1.0] and got.blocks == [(9, 13), None, (0, 5)]
    assert got.boundary == [None, 0, None]  # the later key c was written first
    assert task.element_report("a=71", EX).boundary == [None, 4, 4]  # no later key aligned: the end (EOS)
    assert task.element_report("", EX).boundary == [0, 0, 0]
    assert task.task_rewards()["quality"]([EX.prompt], ["a=71;c=gxd"], [EX.answer]) == [pytest.approx(5 / 9)]


def test_demonstrations():
    task = build_task({"name": "fields", "count": 4, "length": 2})
    for ex in task.examples("train", 30, 0):
        assert task.is_correct(task.demonstration(ex), ex)
        got = task.element_report(ex.answer, ex)
        assert got.quality == [1.0] * 4 and got.errors == [] and len(ex.answer) <= task.max_completion_chars
    with pytest.raises(ValueError, match="count"):
        build_task({"name": "fields", "count": 9})
