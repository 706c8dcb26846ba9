"""The generated image tasks: split by picture, determinism, answers that match the drawn pixels, demonstrations."""
import numpy as np
import pytest

from polo.tasks import build_task
from polo.tasks.shapes import BACKGROUND, PALETTE


def pictures(examples, size=32):
    return np.stack([np.frombuffer(e.columns["image"], np.uint8).reshape(size, size, 3) for e in examples])


def cell_centres(task):
    cell = task.image_size // task.grid
    centre = np.arange(task.grid) * cell + cell // 2
    return np.meshgrid(centre, centre, indexing="ij"), cell


@pytest.mark.parametrize("name", ["shape_count", "shape_score"])
def test_splits_are_disjoint_by_picture_and_deterministic(name):
    task = build_task(name)
    train, test = task.examples("train", 150, 0), task.examples("test", 30, 0)
    assert not {task.problem_key(e) for e in train} & {task.problem_key(e) for e in test}
    assert not {e.columns["image"] for e in train} & {e.columns["image"] for e in test}
    again = task.examples("train", 150, 0)
    assert [(e.prompt, e.answer, e.columns["image"]) for e in again] == [(e.prompt, e.answer, e.columns["image"])
                                                                         for e in train]
    assert task.examples("train", 5, 1)[0].columns["image"] != train[0].columns["image"]


def test_count_answers_match_the_pixels():
    """Each cell's centre pixel shows its shape's colour; counting the asked colour there gives the answer."""
    task = build_task("shape_count")
    examples = task.examples("train", 100, 0)
    (ys, xs), _ = cell_centres(task)
    centres = pictures(examples)[:, ys, xs]  # [N, grid, grid, 3]
    asked = np.array([PALETTE[e.columns["colour"]] for e in examples])
    counts = (centres == asked[:, None, None, :]).all(-1).sum((1, 2))
    assert counts.tolist() == [int(e.answer) for e in examples] == [e.columns["count"] for e in examples]
    first = examples[0]
    assert first.prompt == f"<image>how many {first.columns['colour']}?"
    assert set(int(e.answer) for e in examples) == set(range(task.max_shapes + 1))  # every count is asked


def test_score_answers_match_the_pixels():
    """Shapes: cells whose centre is not background; large ones also cover the pixel 3/8 of a cell right of it."""
    task = build_task("shape_score")
    examples = task.examples("train", 100, 0)
    (ys, xs), cell = cell_centres(task)
    images = pictures(examples)
    filled = (images[:, ys, xs] != BACKGROUND).any(-1)
    large = (images[:, ys, xs + 3 * cell // 8] != BACKGROUND).any(-1) & filled
    n, n_large = filled.sum((1, 2)), large.sum((1, 2))
    expected = np.floor(10 * (n + n_large) / (2 * task.max_shapes) + 0.5) / 10
    assert np.allclose(expected, [e.columns["score"] for e in examples], atol=1e-4)
    assert [f"{s:.1f}" for s in expected] == [e.answer for e in examples]
    assert all(0.0 < e.columns["score"] <= 1.0 for e in examples)


@pytest.mark.parametrize("config", ["shape_count", "shape_score", {"name": "shape_count", "think": True},
                                    {"name": "shape_score", "think": True}])
def test_demonstrations_verify_and_fit_the_completion_cap(config):
    task = build_task(config)
    examples = task.examples("train", 100, 0)
    demos = [task.demonstration(e) for e in examples]
    assert all(task.verify(demos, examples))
    assert max(len(d) for d in demos) <= task.max_completion_chars
    wrong = ["<think>0</think><answer>9</answer>" if task.think else "9" for _ in examples]
    assert not any(task.verify(wrong, examples))
    assert not any(task.verify(["", "banana"] * 50, examples))


def test_think_format_demonstrations_and_verifier():
    count = build_task({"name": "shape_count", "think": True})
    example = next(e for e in count.examples("train", 100, 0) if e.answer == "3")
    assert count.demonstration(example) == "<think>1,2,3</think><answer>3</answer>"
    assert count.is_correct(" <think>3</think> <answer>3</answer>", example)
    assert not count.is_correct("3", example)  # the think variant reads the answer block
    zero = next(e for e in count.examples("train", 100, 0) if e.answer == "0")
    assert count.demonstration(zero) == "<think>0</think><answer>0</answer>"
    score = build_task({"name": "shape_score", "think": True})
    example = score.examples("train", 1, 0)[0]
    shapes, large = example.columns["shapes"], example.columns["large"]
    assert score.demonstration(example) == f"<think>{shapes}+{large}</think><answer>{example.answer}</answer>"
    assert score.is_correct(f"<think>x</think><answer>{example.columns['score']:.2f}</answer>", example)


def test_bad_knobs_are_named():
    with pytest.raises(ValueError, match="max_shapes=17"):
        build_task({"name": "shape_count", "max_shapes": 17})
    with pytest.raises(ValueError, match="image_size=30"):
        build_task({"name": "shape_count", "image_size": 30})
    with pytest.raises(ValueError, match="grid=8 cells of at least 8 px"):
        build_task({"name": "shape_score", "grid": 8})
    with pytest.raises(ValueError, match="colours"):
        build_task({"name": "shape_count", "colours": 9})


def test_one_colour_asks_counts_of_at_least_one():
    task = build_task({"name": "shape_count", "colours": 1})
    examples = task.examples("train", 100, 0)
    assert all(e.columns["colour"] == "red" and e.columns["count"] == e.columns["shapes"] >= 1 for e in examples)
