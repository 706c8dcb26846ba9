"""The countdown expression evaluator (no eval) and the countdown verifier and rewards."""
import pytest

from polo.tasks import Example, build_task, score
from polo.tasks.expression import MAX_DEPTH, ExpressionError, evaluate


@pytest.mark.parametrize(
    "text, value, numbers",
    [
        ("(3+5)*7", 56, [3, 5, 7]),
        (" 2 * ( 3 + 4 ) ", 14, [2, 3, 4]),
        ("10-2-3", 5, [10, 2, 3]),
        ("2*3+4*5", 26, [2, 3, 4, 5]),
        ("8/4/2", 1, [8, 4, 2]),
        ("7-9", -2, [7, 9]),
        ("((5))", 5, [5]),
        ("0+10*0", 0, [0, 10, 0]),
    ],
)
def test_evaluates_valid_expressions(text, value, numbers):
    assert evaluate(text) == (value, numbers)


@pytest.mark.parametrize(
    "text, message",
    [
        ("__import__('os').system('ls')", "unexpected character '_'"),
        ("x+1", "unexpected character 'x'"),
        ("abs(3)", "unexpected character 'a'"),
        ("2**3", "expected a number"),
        ("(2+3", "unexpected end"),
        ("2+3)", "unexpected '\\)'"),
        ("5/0", "division by zero"),
        ("5/(2-2)", "division by zero"),
        ("7/2", "inexact division 7/2"),
        ("", "unexpected end"),
        ("-3+5", "expected a number"),
        ("2.5*2", "unexpected character '.'"),
        ("3 5", "unexpected '5'"),
        ("\u0663+1", "unexpected character"),
        ("2\u00b2", "unexpected character"),
        ("(" * (MAX_DEPTH + 1) + "1" + ")" * (MAX_DEPTH + 1), "nested deeper"),
        ("1+" * 400 + "1", "longer than"),
        ("03+5", "leading zero '03'"),
        ("(00)", "leading zero '00'"),
    ],
)
def test_rejects_invalid_expressions(text, message):
    with pytest.raises(ExpressionError, match=message):
        evaluate(text)


EXAMPLE = Example("3 5 7>56:", "56", {"numbers": (3, 5, 7), "solution": "(3+5)*7"})


@pytest.mark.parametrize(
    "completion, correct, fmt, close",
    [
        ("(3+5)*7", 1, 1, 1.0),
        ("7*(5+3)", 1, 1, 1.0),
        ("3*5+7", 0, 1, 1 - 34 / 56),  # valid, wrong value
        ("3*5*7", 0, 1, 1 - 49 / 56),
        ("(3+5)*7*7", 0, 0, 0.0),  # reuses 7
        ("8*7", 0, 0, 0.0),  # 8 is not given
        ("56", 0, 0, 0.0),
        ("7/2", 0, 0, 0.0),  # inexact division
        ("5/(3-3)", 0, 0, 0.0),  # reuses 3 and divides by zero
        ("2**3", 0, 0, 0.0),
        ("__import__('os')", 0, 0, 0.0),
        ("(3+5", 0, 0, 0.0),
        ("(03+5)*7", 0, 0, 0.0),  # 03 is not the given 3
        ("(3+5)*07", 0, 0, 0.0),
        ("", 0, 0, 0.0),
    ],
)
def test_countdown_verifier_and_rewards(completion, correct, fmt, close, f32):
    task = build_task("countdown")
    assert task.is_correct(completion, EXAMPLE) is bool(correct)
    rewards, names, _ = score(task, ["correct", "format", "closeness"], [EXAMPLE], [completion])
    # float64 rewards stored as float32: one rounding, at most ½ ulp, within rel = eps32
    assert rewards[0].tolist() == pytest.approx([correct, fmt, close], rel=f32.EPS, abs=0)


def test_closeness_is_clipped_at_zero_and_repeated_numbers_count_as_a_multiset():
    task = build_task("countdown")
    ex = Example("3 3 7>16:", "16", {"numbers": (3, 3, 7), "solution": "3*3+7"})
    rewards, _, _ = score(task, ["correct", "format", "closeness"], [ex] * 3, ["3*3+7", "3*3*7", "3*3*3"])
    assert rewards.tolist() == [[1, 1, 1], [0, 1, 0], [0, 0, 0]]


def test_countdown_prompts_are_sorted_numbers_and_target():
    task = build_task({"name": "countdown", "count": 4, "max_value": 12})
    for ex in task.examples("train", 30, seed=5):
        numbers, target = ex.prompt.removesuffix(":").split(">")
        given = ex.columns["numbers"]
        assert tuple(map(int, numbers.split())) == given == tuple(sorted(given))
        assert target == ex.answer and int(target) > 0 and max(ex.columns["numbers"]) <= 12
