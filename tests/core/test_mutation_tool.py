"""The plumbing of ``bench/mutation.py`` (the mutation-testing command, docs/mutation.md), without running mutmut."""
import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "mutation.py"
if not SCRIPT.exists():  # mutmut's copy of the tests in ./mutants has no bench/
    pytest.skip("bench/mutation.py is not beside these tests", allow_module_level=True)
spec = importlib.util.spec_from_file_location("bench_mutation", SCRIPT)
mutation = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mutation)


def test_families_are_the_subfolders_and_top_level_modules():
    assert mutation.family("polo/core/advantages/spo.py") == "advantages"
    assert mutation.family("polo/core/aggregation.py") == "aggregation"
    assert mutation.family("polo/control/math/qoed.py") == "control"


def test_mutant_names_of_a_file():
    assert mutation.mutant_glob("polo/core/credit/cort.py") == "polo.core.credit.cort.*"
    assert mutation.mutant_glob("polo/core/credit/__init__.py") == "polo.core.credit.x*"


def test_selection_by_family_and_path_and_bad_names():
    files = mutation.select(["credit"], ["polo/core/advantages/spo.py"])
    assert "polo/core/credit/cort.py" in files and "polo/core/advantages/spo.py" in files
    assert "polo/core/advantages/vulpo.py" not in files
    with pytest.raises(SystemExit, match="--family 'credits'"):
        mutation.select(["credits"], [])
    with pytest.raises(SystemExit, match="--paths 'polo/cli.py'"):
        mutation.select([], ["polo/cli.py"])


def test_function_lines_match_mutmuts_names():
    lines = mutation.function_lines("polo/core/credit/cort.py")
    source = (SCRIPT.parents[1] / "polo/core/credit/cort.py").read_text().splitlines()
    assert source[lines["x_smoothstep"] - 1].startswith("def smoothstep(")
    assert source[lines["xǁCoRTǁtarget"] - 1].strip().startswith("def target(")
