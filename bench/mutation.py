"""Mutation testing of the mechanisms: which one-token changes of polo's math do the unit tests catch? (#34)

    python bench/mutation.py                                   # every family (polo/core and polo/control/math)
    python bench/mutation.py --family advantages --family credit
    python bench/mutation.py --paths polo/core/advantages/spo.py polo/core/credit/cort.py
    python bench/mutation.py --family losses --unchecked       # resume: skip files whose mutants all have a result
    python bench/mutation.py --paths polo/core/credit/cort.py --survivors   # after new tests: re-test survivors only
    python bench/mutation.py --family losses --report-only     # print the cached results, run nothing

A wrapper around mutmut 3 (the ``mutation`` extra; its settings are ``[tool.mutmut]`` in pyproject.toml):
mutmut copies polo/ and tests/ into ./mutants, rewrites each function of the files it mutates into a trampoline
over its mutants (a flipped operator, a changed constant, a swapped argument, ...), records once which unit
tests reach each function, then runs, for every mutant, only those tests in a forked worker. A mutant is
*killed* when a test fails. This script runs the mutants of the chosen files (``--max-children 1`` by default:
one worker) and prints, per family (the subfolder of polo/core, a top-level module of polo/core by its name,
``control`` for polo/control/math), killed / total and every surviving mutant as ``file:line`` with its change.
Results are cached in ./mutants; a run re-tests the mutants of the files it names (all of them with
``--family``/``--paths``, the unfinished files with ``--unchecked``, the survivors with ``--survivors``).
Survivors judged equivalent (no input can tell them from the original) are listed with their reason in
bench/mutation_equivalents.yaml; the scores leave them out: killed / (total − equivalent). docs/mutation.md has
the scores. Runs, not tests: CI does not run it.
"""
from __future__ import annotations

import argparse
import ast
import json
import os
import re
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
MUTATED = ("polo/core", "polo/control/math", "polo/methods")
"""The folders ``[tool.mutmut] only_mutate`` names (keep the two in step; in polo/methods only the components'
files: advantage.py, shaping.py, self_distill.py)."""
METHOD_PARTS = ("advantage.py", "shaping.py", "self_distill.py")
EQUIVALENTS = ROOT / "bench" / "mutation_equivalents.yaml"
"""file → [{change: "old  →  new" as the report prints it, why: reason}]: survivors no test can kill."""
HUNK = re.compile(r"^@@ -(\d+)")
CENTRAL = {
    "polo/core/advantages/spo.py": {"success_probability", "sampling_weights", "init_offline", "after_update"},
    "polo/core/credit/cort.py": {"smoothstep", "target"},
    "polo/core/credit/dgpo_hellinger.py": {"dgpo_scores"},
    "polo/core/regularizers/distill.py": {"scope"},
    "polo/core/shaping/prs.py": {"progressive_reward"},
}
"""Besides every ``__call__`` (a component's formula), the functions that compute a mechanism's formula: their
mutants are the *central* ones, scored apart (in polo/control/math every function but the argument checks)."""


def is_central(path: str, function: str) -> bool:
    """A component's ``__call__``, a formula helper named in CENTRAL, or any function of the control methods' math
    but its argument checks (``_check*``)."""
    if family(path) == "control":
        return not function.startswith("_check")
    return function == "__call__" or function in CENTRAL.get(path, ())


def family(path: str) -> str:
    """``polo/core/advantages/spo.py`` → ``advantages``; ``polo/core/aggregation.py`` → ``aggregation``;
    ``polo/control/math/qoed.py`` → ``control``; ``polo/methods/appo/advantage.py`` → ``methods``."""
    parts = Path(path).parts
    if parts[:3] == ("polo", "control", "math"):
        return "control"
    if parts[:2] == ("polo", "methods"):
        return "methods"
    return parts[2] if len(parts) > 3 else Path(parts[2]).stem


def source_files() -> list[str]:
    files = (p.relative_to(ROOT) for d in MUTATED for p in (ROOT / d).rglob("*.py"))
    return sorted(str(p) for p in files if p.parts[1] != "methods" or p.name in METHOD_PARTS)


def select(families: list[str], paths: list[str]) -> list[str]:
    files = source_files()
    known = sorted({family(f) for f in files})
    for name in families:
        if name not in known:
            raise SystemExit(f"--family {name!r}: expected one of {', '.join(known)}")
    for path in paths:
        if path not in files:
            raise SystemExit(f"--paths {path!r}: expected a .py file under {' or '.join(MUTATED)}")
    if not families and not paths:
        return files
    return [f for f in files if family(f) in families or f in paths]


def mutant_glob(path: str) -> str:
    """The mutmut names of a file's mutants: ``polo.core.credit.cort.*`` (``polo.core.credit.x*`` for an
    ``__init__.py``, whose functions mutmut names after the package)."""
    module = path[: -len(".py")].replace("/", ".")
    return module[: -len(".__init__")] + ".x*" if module.endswith(".__init__") else module + ".*"


def function_lines(path: str) -> dict[str, int]:
    """mutmut's mangled function name (``x_f``, ``xǁClassǁmethod``) → the line of its ``def``."""
    module = ast.parse((ROOT / path).read_text())
    functions = (ast.FunctionDef, ast.AsyncFunctionDef)
    lines = {f"x_{node.name}": node.lineno for node in module.body if isinstance(node, functions)}
    for node in ast.walk(module):
        if isinstance(node, ast.ClassDef):
            methods = (item for item in node.body if isinstance(item, functions))
            lines.update({f"xǁ{node.name}ǁ{item.name}": item.lineno for item in methods})
    return lines


def describe(name: str, path: str, def_lines: dict[str, int]) -> tuple[int, str]:
    """(line in the source file, ``old → new``) of a mutant, from mutmut's diff of its function."""
    from mutmut.mutation.diff_apply import get_diff_for_mutant

    diff = get_diff_for_mutant(name, path=path).splitlines()
    start = def_lines.get(name.rpartition(".")[2].partition("__mutmut_")[0], 0)
    offset, old, new = 0, "", ""
    for line in diff:
        if (m := HUNK.match(line)) and not old:
            offset = int(m.group(1)) - 1
        elif line.startswith("-") and not line.startswith("---") and not old:
            old = line[1:].strip()
        elif line.startswith("+") and not line.startswith("+++") and not new:
            new = line[1:].strip()
        elif old == "" and not line.startswith(("---", "+++")):
            offset += 1
    source = (ROOT / path).read_text().splitlines()
    guess = start + offset
    if not (0 < guess <= len(source) and source[guess - 1].strip() == old):  # the def line moved (decorators)
        guess = next((i + 1 for i in range(start - 1, len(source)) if source[i].strip() == old), guess)
    return guess, f"{old}  →  {new}"


def exit_codes(path: str) -> dict[str, int | None]:
    """mutmut's result per mutant of a file (exit code of its test run: 1 killed, 0 survived, None not run)."""
    meta = Path("mutants") / (path + ".meta")
    return json.loads(meta.read_text())["exit_code_by_key"] if meta.exists() else {}


def checked(path: str) -> bool:
    """Whether every mutant of a file has a result in ./mutants (False before its first run)."""
    return (Path("mutants") / (path + ".meta")).exists() and None not in exit_codes(path).values()


def equivalents() -> dict[str, Counter]:
    """file → how many survivors of each change (``old  →  new``) are judged equivalent."""
    listed = yaml.safe_load(EQUIVALENTS.read_text()) or {}
    return {path: Counter(entry["change"] for entry in entries) for path, entries in listed.items()}


def report(files: list[str]) -> int:
    """Print the score per family (killed / (total − equivalent)), the survivors not judged equivalent, and the
    listed equivalents that no longer match a survivor; return the number of survivors not judged equivalent."""
    from mutmut.mutation.data import SourceFileMutationData
    from mutmut.stats import status_by_exit_code

    judged = equivalents()
    counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    central: dict[str, list[int]] = defaultdict(lambda: [0, 0])  # family → [killed, total − equivalent]
    survivors, stale = [], []
    for path in files:
        data = SourceFileMutationData(path=Path(path))
        data.load()
        def_lines = function_lines(path)
        unmatched = Counter(judged.get(path, {}))
        for name, code in sorted(data.exit_code_by_key.items()):
            status = status_by_exit_code[code]
            line, change = describe(name, path, def_lines) if status != "killed" else (0, "")
            if status == "survived" and unmatched[change] > 0:
                unmatched[change] -= 1
                status = "equivalent"
            counts[family(path)][status] += 1
            function = name.partition("__mutmut_")[0].rpartition(".")[2].removeprefix("x_").rpartition("ǁ")[2]
            if status != "equivalent" and is_central(path, function):
                central[family(path)][0] += status == "killed"
                central[family(path)][1] += 1
            if status in ("survived", "no tests", "suspicious"):
                survivors.append((path, line, status, change, name))
        stale += [(path, change) for change, n in unmatched.items() for _ in range(n)]
    print(f"\n{'family':<16}{'killed':>8}{'judged':>8}{'score':>8}{'central':>18}   other")
    for fam in sorted(counts):
        c = counts[fam]
        judged_total = sum(c.values()) - c["equivalent"]
        other = ", ".join(f"{k} {v}" for k, v in sorted(c.items()) if k != "killed")
        kc, tc = central[fam]
        core = f"{kc}/{tc} {100 * kc / tc:.1f}%" if tc else "-"
        score = f"{100 * c['killed'] / judged_total:.1f}%" if judged_total else "-"
        print(f"{fam:<16}{c['killed']:>8}{judged_total:>8}{score:>8}{core:>18}   {other}")
    print("(judged: total − equivalent; central: the mutants of __call__ and of the formula helpers in CENTRAL)")
    if survivors:
        print("\nnot killed (file:line  status  change  [mutmut name: `mutmut show NAME`]):")
        for path, line, status, change, name in sorted(survivors, key=lambda s: (s[0], s[1])):
            print(f"{path}:{line}  {status}  {change}  [{name}]")
    if stale:
        print(f"\nlisted in {EQUIVALENTS.name} but no longer a survivor (the code changed: re-judge or remove):")
        for path, change in stale:
            print(f"{path}  {change}")
    return len(survivors)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--family", action="append", default=[],
                        help="a subfolder of polo/core, a top-level module of it, or control (repeatable)")
    parser.add_argument("--paths", nargs="+", default=[], help="source files to mutate (under polo/core or "
                        "polo/control/math)")
    parser.add_argument("--max-children", type=int, default=1, help="mutmut workers (default 1)")
    parser.add_argument("--unchecked", action="store_true",
                        help="skip the files whose mutants all have a result (resume an interrupted run)")
    parser.add_argument("--survivors", action="store_true",
                        help="re-test only the mutants that survived last time (after adding tests)")
    parser.add_argument("--report-only", action="store_true", help="print the cached results of ./mutants")
    args = parser.parse_args()
    os.chdir(ROOT)  # mutmut reads [tool.mutmut] from ./pyproject.toml and works in ./mutants
    files = select(args.family, args.paths)
    run = [f for f in files if not (args.unchecked and checked(f))]
    names = [mutant_glob(f) for f in run] if args.family or args.paths or args.unchecked else []
    if args.survivors:  # exact names: mutmut runs just these, with the tests that reached their functions
        names = [name for f in files for name, code in exit_codes(f).items() if code == 0]
    if not args.report_only and (names or not (args.survivors or args.unchecked)):
        command = [sys.executable, "-m", "mutmut", "run", "--max-children", str(args.max_children), *names]
        env = {**os.environ, "POLO_CACHE": os.environ.get("POLO_CACHE", "/tmp/polo_cache")}
        subprocess.run(command, check=True, env=env)
    report(files)


if __name__ == "__main__":
    main()
