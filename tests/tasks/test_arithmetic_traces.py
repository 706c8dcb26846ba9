"""addition_trace and multiplication_trace: exact traces, every trace's arithmetic re-checked, length bounds,
verification of final answers, disjoint splits, knob errors."""
import random
import re

import pytest

from polo.core.registry import ConfigError
from polo.tasks import Example, build_task, score, split_of
from polo.tasks.addition_trace import column_sum_lines

ADDITION = [{"name": "addition_trace", "digits": d} for d in (1, 2, 3, 5, 8, 16)]
MULTIPLICATION = [{"name": "multiplication_trace", "digits_a": a, "digits_b": b}
                  for a, b in ((1, 1), (2, 1), (3, 1), (2, 2), (3, 2), (4, 2), (3, 3), (9, 9))]
CONFIGS = ADDITION + MULTIPLICATION
IDS = ["-".join(str(v) for v in c.values()) for c in CONFIGS]

COLUMN = re.compile(r"^(\d(?:\+\d)+)=(\d\d) (\d) c(\d)$")
PRODUCT = re.compile(r"^(\d)\*(\d)=(\d\d)\+(\d)=(\d\d) (\d) c(\d)$")


def test_addition_trace_by_hand():
    task = build_task({"name": "addition_trace", "digits": 4})
    example = Example("4827+3956=", "8783")
    assert task.demonstration(example) == (
        "7+6+0=13 3 c1\n2+5+1=08 8 c0\n8+9+0=17 7 c1\n4+3+1=08 8 c0\n#### 8783")
    last_carry = Example("95+17=", "112")
    assert build_task({"name": "addition_trace", "digits": 2}).demonstration(last_carry) == (
        "5+7+0=12 2 c1\n9+1+1=11 1 c1\n#### 112")


def test_multiplication_trace_by_hand():
    task = build_task({"name": "multiplication_trace", "digits_a": 3, "digits_b": 2})
    assert task.demonstration(Example("482*37=", "17834")) == "\n".join([
        "*37", "2*7=14+0=14 4 c1", "8*7=56+1=57 7 c5", "4*7=28+5=33 3 c3", "=03374",
        "*03", "2*3=06+0=06 6 c0", "8*3=24+0=24 4 c2", "4*3=12+2=14 4 c1", "=14460",
        "4+0+0=04 4 c0", "7+6+0=13 3 c1", "3+4+1=08 8 c0", "3+4+0=07 7 c0", "0+1+0=01 1 c0",
        "#### 17834"])
    one_digit = build_task({"name": "multiplication_trace", "digits_a": 2, "digits_b": 1})
    assert one_digit.demonstration(Example("12*3=", "36")) == "*3\n2*3=06+0=06 6 c0\n1*3=03+0=03 3 c0\n=036\n#### 36"


def test_column_sum_of_three_operands_carries_two():
    lines, total = column_sum_lines(["999", "999", "999"])
    assert lines == ["9+9+9+0=27 7 c2", "9+9+9+2=29 9 c2", "9+9+9+2=29 9 c2"] and total == "2997"
    with pytest.raises(ValueError, match="one width"):
        column_sum_lines(["12", "3"])


def check_columns(lines: list[str]) -> str:
    """Re-do the arithmetic of column lines (sum, kept digit, carry chain); the total they spell."""
    carry, kept = 0, []
    for line in lines:
        match = COLUMN.match(line)
        assert match, line
        *digits, carry_in = map(int, match.group(1).split("+"))
        total, digit, carry_out = int(match.group(2)), int(match.group(3)), int(match.group(4))
        assert carry_in == carry and total == sum(digits) + carry_in and (digit, carry_out) == divmod(total, 10)[::-1]
        kept.append(str(digit))
        carry = carry_out
    return str(int(str(carry) + "".join(reversed(kept))))


def check_multiplication(prompt: str, trace: list[str]) -> str:
    """Re-do the shifted multipliers, the products line by line, the shifted partials and their column sum; the
    product they spell."""
    a, b = prompt[:-1].split("*")
    width, rows, partials = len(a) + len(b), iter(trace), []
    for place, m in enumerate(reversed(b)):
        assert next(rows) == "*" + (b[:len(b) - place]).zfill(len(b))
        carry, kept = 0, []
        for x in reversed(a):
            match = PRODUCT.match(next(rows))
            assert match and match.group(1, 2) == (x, m) and match.group(3) == f"{int(x) * int(m):02d}"
            assert int(match.group(4)) == carry
            value = int(x) * int(m) + carry
            assert match.group(5, 6, 7) == (f"{value:02d}", str(value % 10), str(value // 10))
            kept.append(match.group(6))
            carry = value // 10
        partial = next(rows)
        assert partial == "=" + (str(carry) + "".join(reversed(kept)) + "0" * place).zfill(width)
        partials.append(partial[1:])
    rest = list(rows)
    if len(b) == 1:
        assert rest == []
        return str(int(partials[0]))
    assert [COLUMN.match(line).group(1).split("+")[:-1] for line in rest] == [
        [p[c] for p in partials] for c in range(width - 1, -1, -1)]
    return check_columns(rest)


@pytest.mark.parametrize("config", CONFIGS, ids=IDS)
def test_every_trace_computes_the_answer_and_fits_the_bound(config):
    task = build_task(config)
    examples = task.examples("train", 2000, seed=5)
    demos = [task.demonstration(e) for e in examples]
    assert max(map(len, demos)) <= task.max_completion_chars
    assert max(map(len, demos)) == task.max_completion_chars or config.get("digits", 0) == 1 or (
        config.get("digits_a") == config.get("digits_b") == 1)  # exact once the answer has its most digits
    for example, demo in zip(examples[:300], demos):
        *trace, answer_line = demo.split("\n")
        assert answer_line == f"#### {example.answer}"
        worked = (check_columns(trace) if config["name"] == "addition_trace"
                  else check_multiplication(example.prompt, trace))
        assert worked == example.answer == str(eval(example.prompt[:-1]))  # noqa: S307  (digits and one operator)
    rewards, names, _ = score(task, ["correct", "format", "digit_match"], examples[:50], demos[:50])
    assert names == ("correct", "format", "digit_match") and bool((rewards == 1.0).all())


@pytest.mark.parametrize("config", [ADDITION[2], MULTIPLICATION[4]], ids=["add3", "mul3x2"])
def test_wrong_or_markerless_completions_are_wrong(config):
    task = build_task(config)
    examples = task.examples("test", 20, seed=1)
    for ex in examples:
        demo = task.demonstration(ex)
        trace = demo.rsplit("\n", 1)[0]
        wrong = str(int(ex.answer) + 1)
        for bad in [trace, ex.answer, f"{trace}\n#### ", f"{trace}\n#### {wrong}", f"{trace}\n### {ex.answer}",
                    f"{trace}\n#### {ex.answer}0"]:
            assert not task.is_correct(bad, ex), bad
        assert task.is_correct(f"{trace}\n#### {ex.answer} \n", ex)
        assert task.is_correct(f"junk\n#### {ex.answer}", ex)  # the verifier reads the answer only


def test_digit_match_reads_the_final_answer_only():
    task = build_task({"name": "addition_trace", "digits": 4})
    example = Example("4827+3956=", "8783")
    completions = ["7+6+0=13 3 c1\n#### 8780", "#### 18783", "8783", "#### 8783"]
    rewards = score(task, ["digit_match", "format", "correct"], [example] * 4, completions)[0].flatten().tolist()
    assert rewards == pytest.approx([0.75, 1, 0, 0.8, 1, 0, 0, 0, 0, 1, 1, 1])


@pytest.mark.parametrize("config", [ADDITION[0], ADDITION[3], MULTIPLICATION[0], MULTIPLICATION[4]],
                         ids=["add1", "add5", "mul1x1", "mul3x2"])
def test_splits_are_disjoint_and_operands_have_their_digits(config):
    task = build_task(config)
    train = task.examples("train", 500, seed=0)
    test = task.examples("test", 100, seed=0)
    assert not {e.prompt for e in train} & {e.prompt for e in test}
    assert all(split_of(e.prompt, task.test_fraction) == "test" for e in test)
    assert task.examples("train", 30, seed=3) == task.examples("train", 30, seed=3) != task.examples("train", 30, 4)
    sizes = ([config["digits"]] * 2 if "digits" in config else [config["digits_a"], config["digits_b"]])
    for e in train + test:
        operands = re.split(r"[+*]", e.prompt[:-1])
        assert [len(x) for x in operands] == sizes and all(x == "0" or x[0] != "0" for x in operands)


@pytest.mark.parametrize("config, key", [
    ({"name": "addition_trace", "digits": 0}, "digits"),
    ({"name": "addition_trace", "digits": 17}, "digits"),
    ({"name": "addition_trace", "digits": "many"}, "digits"),
    ({"name": "addition_trace", "digit": 3}, "digit"),
    ({"name": "multiplication_trace", "digits_a": 0}, "digits_a"),
    ({"name": "multiplication_trace", "digits_b": 10}, "digits_b"),
    ({"name": "multiplication_trace", "digits": 3}, "digits"),
])
def test_bad_knobs_are_config_errors_naming_the_key(config, key):
    with pytest.raises(ConfigError, match=key):
        build_task(config)


def test_random_problem_space_covers_carries():
    task = build_task({"name": "addition_trace", "digits": 3})
    demos = [task.demonstration(task.sample(random.Random(i))) for i in range(200)]
    assert any("c1" in d for d in demos) and any(d.count("c0") == 3 for d in demos)
