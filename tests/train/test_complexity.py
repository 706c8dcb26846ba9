"""The trainer's constructor holds state and the updater's loop is a plan and a step: each stays at McCabe
cyclomatic complexity 12 or below (counted here from the syntax tree, nested functions apart)."""
import ast
import inspect

import pytest

from polo.train.trainer import Trainer
from polo.train.update import Updater

BRANCHES = (ast.If, ast.IfExp, ast.For, ast.AsyncFor, ast.While, ast.ExceptHandler, ast.With, ast.AsyncWith,
            ast.Assert, ast.match_case)


def complexity(function) -> int:
    """1 + one per branch: if / conditional expression / loop / except / with / assert / match case, each extra
    operand of ``and`` / ``or``, each ``for`` and ``if`` of a comprehension; nested functions and lambdas are
    their own."""
    tree = ast.parse(inspect.cleandoc("\n" + inspect.getsource(function))).body[0]
    count, todo = 1, list(ast.iter_child_nodes(tree))
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        count += isinstance(node, BRANCHES)
        count += len(node.values) - 1 if isinstance(node, ast.BoolOp) else 0
        count += 1 + len(node.ifs) if isinstance(node, ast.comprehension) else 0
        todo.extend(ast.iter_child_nodes(node))
    return count


def test_the_counter_counts_branches():
    def f(x):
        if x and x > 1 or x < -1:
            return [y for y in range(x) if y]
        return 0 if x else 1
    assert complexity(f) == 1 + 1 + 2 + 2 + 1


@pytest.mark.parametrize("function", [Trainer.__init__, Updater.run, Updater.minibatch_plan, Updater.step,
                                      Updater.backward])
def test_complexity_at_most_12(function):
    assert complexity(function) <= 12, f"{function.__qualname__}: {complexity(function)}"
