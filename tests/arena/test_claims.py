"""Claims of arena files: the metrics per run, the verdict rule, validation, the report section and
``polo arena-claims``."""
import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from polo.arena import load_arena, write_report
from polo.arena.claim_metrics import Caps, run_metric
from polo.arena.claims import HELD, INCONCLUSIVE, NOT_HELD, ClaimResult, judge_test
from polo.arena.spec import Claim, ClaimTest
from polo.arena.summary import ACCURACY, RunResult
from polo.core.registry import ConfigError

from .helpers import fake_run, write_arena

F64 = 1e-12
"""Absolute tolerance of float64 means and percentiles of a few values of magnitude ≤ 10."""


def _judge(treatment, baseline, direction="higher", kind="superiority", margin=0.0):
    """A test judged on per-seed values given as lists (seed = index) or dicts."""
    as_dict = lambda v: v if isinstance(v, dict) else dict(enumerate(v))  # noqa: E731
    test = ClaimTest(metric="final_accuracy", direction=direction, kind=kind, margin=margin)
    return judge_test(test, as_dict(treatment), as_dict(baseline), ("new", "old"))


@pytest.mark.parametrize("treatment, baseline, direction, kind, margin, verdict", [
    ([0.6, 0.5, 0.7], [0.5, 0.4, 0.5], "higher", "superiority", 0.0, HELD),         # d = .1, .1, .2
    ([0.4, 0.3, 0.5], [0.5, 0.4, 0.5], "higher", "superiority", 0.0, NOT_HELD),     # d = -.1, -.1, 0: high = 0
    ([0.6, 0.3, 0.5], [0.5, 0.4, 0.4], "higher", "superiority", 0.0, INCONCLUSIVE),  # d = .1, -.1, .1
    ([0.5, 0.5, 0.5], [0.5, 0.5, 0.5], "higher", "superiority", 0.0, NOT_HELD),     # d = 0 everywhere: not above 0
    ([40.0, 50.0, 45.0], [60.0, 55.0, 50.0], "lower", "superiority", 0.0, HELD),    # faster on every seed
    ([70.0, 50.0, 45.0], [60.0, 55.0, 50.0], "lower", "superiority", 0.0, INCONCLUSIVE),
    ([0.6, 0.5, 0.7], [0.5, 0.4, 0.5], "higher", "superiority", 0.05, HELD),        # d ≥ .1 > .05
    ([0.6, 0.5, 0.7], [0.5, 0.4, 0.5], "higher", "superiority", 0.15, INCONCLUSIVE),  # .1, .1 ≤ .15 < .2
    ([0.6, 0.5, 0.7], [0.5, 0.4, 0.5], "higher", "superiority", 0.25, NOT_HELD),    # every d ≤ .25
    ([0.49, 0.39, 0.49], [0.5, 0.4, 0.5], "higher", "non_inferiority", 0.03, HELD),  # d = -.01 > -.03
    ([0.45, 0.35, 0.45], [0.5, 0.4, 0.5], "higher", "non_inferiority", 0.03, NOT_HELD),  # d = -.05
    ([0.45, 0.41, 0.49], [0.5, 0.4, 0.5], "higher", "non_inferiority", 0.03, INCONCLUSIVE),  # -.05, .01, -.01
    ([101.0, 98.0, 102.0], [100.0, 100.0, 100.0], "lower", "non_inferiority", 5.0, HELD),  # at most 2 slower
    ([110.0, 108.0, 107.0], [100.0, 100.0, 100.0], "lower", "non_inferiority", 5.0, NOT_HELD),
])
def test_verdicts(treatment, baseline, direction, kind, margin, verdict):
    result = _judge(treatment, baseline, direction, kind, margin)
    assert result.verdict == verdict and result.seeds == [0, 1, 2] and result.reason == ""


def test_difference_is_signed_so_better_is_positive_and_means_are_raw():
    result = _judge([40.0, 50.0, 45.0], [60.0, 55.0, 50.0], direction="lower")
    assert result.diff.mean == pytest.approx(10.0, abs=F64)  # baseline − treatment
    assert result.mean(result.treatment) == pytest.approx(45.0, abs=F64)
    assert result.mean(result.baseline) == pytest.approx(55.0, abs=F64)


@pytest.mark.parametrize("d", [[0.3, -0.2, 0.05], [1.0, 2.0], [-0.4, -0.1, -0.7]])
def test_two_or_three_seeds_give_the_range_of_the_differences(d):
    """The docs' reading of the rule: with ≤ 3 seeds the 95 % interval is [min d, max d]."""
    result = _judge(list(d), [0.0] * len(d))
    assert (result.diff.low, result.diff.high) == pytest.approx((min(d), max(d)), abs=F64)


def test_many_seeds_narrow_the_interval_inside_the_range():
    d = np.random.default_rng(0).normal(0.1, 0.05, size=12).tolist()
    result = _judge(d, [0.0] * 12)
    assert min(d) < result.diff.low < result.diff.mean < result.diff.high < max(d)


def test_a_single_seed_is_inconclusive_with_the_reason():
    result = _judge([0.9], [0.1])
    assert result.verdict == INCONCLUSIVE and result.diff is None
    assert result.reason == "1 paired seed(s), at least 2 needed"


def test_seeds_pair_only_where_both_have_a_value():
    result = _judge({0: 0.6, 1: 0.7, 2: 0.8}, {0: 0.5, 1: 0.6, 3: 0.1})
    assert result.seeds == [0, 1] and result.verdict == HELD
    assert result.reason == "no finished run to pair with new_s2, old_s3"
    missing = _judge({0: 0.6, 1: None, 2: 0.8}, {0: 0.5, 1: 0.6, 2: None})
    assert missing.seeds == [0] and missing.verdict == INCONCLUSIVE
    assert missing.reason == "no final_accuracy in new_s1, old_s2; 1 paired seed(s), at least 2 needed"


@pytest.mark.parametrize("verdicts, claim", [
    ((HELD, HELD), HELD), ((HELD, INCONCLUSIVE), INCONCLUSIVE), ((INCONCLUSIVE, NOT_HELD), NOT_HELD),
    ((HELD, NOT_HELD), NOT_HELD), ((INCONCLUSIVE,), INCONCLUSIVE),
])
def test_claim_verdict_combines_its_tests(verdicts, claim):
    values = {HELD: ([0.6, 0.7], [0.5, 0.5]), NOT_HELD: ([0.4, 0.4], [0.5, 0.5]),
              INCONCLUSIVE: ([0.6, 0.4], [0.5, 0.5])}
    tests = [_judge(*values[v]) for v in verdicts]
    assert [t.verdict for t in tests] == list(verdicts)
    assert ClaimResult(None, tests).verdict == claim


# --- metrics per run -------------------------------------------------------------------------------------------

ROWS = [
    {"step": 0, ACCURACY: 0.2},
    {"step": 1, "elapsed_s": 1.0, "response/length": 10.0, "entropy": 0.5},
    {"step": 2, "elapsed_s": 2.0, "response/length": 20.0, "entropy": None, ACCURACY: 0.6},
    {"step": 3, "elapsed_s": 3.0, "response/length": 30.0, "entropy": 0.3},
    {"step": 4, "elapsed_s": 4.0, "response/length": 60.0, ACCURACY: 0.5},
]
CAPS = Caps(seconds=9.0, steps=7)


@pytest.mark.parametrize("name, value", [
    ("final_accuracy", 0.5), ("best_accuracy", 0.6), ("accuracy_gain", 0.3), ("auc", 0.55),
    ("time_to_target", 2.0), ("steps_to_target", 2.0),
    ("mean:response/length", 30.0), ("last:response/length", 60.0),
    ("mean:entropy", 0.4), ("last:entropy", 0.3),  # a null (non-finite) value is skipped
    ("mean:no/such_key", None), ("last:no/such_key", None),
])
def test_run_metrics(name, value):
    got = run_metric(RunResult("x", 0, ROWS), name, 0.55, CAPS)
    assert got == (None if value is None else pytest.approx(value, abs=F64))


def test_target_never_reached_counts_as_the_cap():
    run = RunResult("x", 0, ROWS)
    assert run_metric(run, "time_to_target", 0.9, CAPS) == 9.0
    assert run_metric(run, "steps_to_target", 0.9, CAPS) == 7.0
    assert run_metric(run, "time_to_target", 0.1, CAPS) == 0.0  # the step-0 evaluation already reaches it


def test_the_cap_is_the_longest_run():
    runs = [RunResult("a", 0, ROWS), RunResult("b", 0, ROWS[:3])]
    assert Caps.of(runs) == Caps(seconds=4.0, steps=4)


def test_metrics_a_run_cannot_give_are_none():
    no_start = RunResult("x", 0, ROWS[1:])  # no step-0 evaluation
    assert run_metric(no_start, "accuracy_gain", 0.5, CAPS) is None
    assert run_metric(no_start, "final_accuracy", 0.5, CAPS) == 0.5
    only_start = RunResult("x", 0, ROWS[:2])  # no evaluation after step 0
    assert run_metric(only_start, "auc", 0.5, CAPS) is None
    assert run_metric(only_start, "accuracy_gain", 0.5, CAPS) == 0.0
    no_eval = RunResult("x", 0, [ROWS[1]])
    assert all(run_metric(no_eval, m, 0.5, CAPS) is None
               for m in ("final_accuracy", "best_accuracy", "accuracy_gain", "auc"))


# --- arena files ------------------------------------------------------------------------------------------------

CLAIM = {"id": "grpo_beats_rloo", "statement": "GRPO ends with higher held-out accuracy than RLOO.",
         "paper": "A paper (arXiv:0000.00000)", "treatment": "grpo", "baseline": "rloo",
         "tests": [{"metric": "final_accuracy", "direction": "higher"}]}


def _claim(**fields):
    return {**CLAIM, **fields}


def test_claims_load(tmp_path):
    tests = [{"metric": "final_accuracy", "direction": "higher"},
             {"metric": "mean:response/length", "direction": "lower", "kind": "non_inferiority", "margin": 2}]
    arena = load_arena(write_arena(tmp_path / "a.yaml", claims=[_claim(tests=tests)]))
    (claim,) = arena.file.claims
    assert isinstance(claim, Claim) and claim.tests[1].margin == 2.0 and claim.tests[0].kind == "superiority"


@pytest.mark.parametrize("claims, message", [
    ([_claim(tests=[{"metric": "final_acc", "direction": "higher"}])], "unknown metric 'final_acc'"),
    ([_claim(tests=[{"metric": "mean:", "direction": "higher"}])], "unknown metric 'mean:'"),
    ([_claim(tests=[{"metric": "auc", "direction": "up"}])], "claims.0.tests.0.direction"),
    ([_claim(tests=[{"metric": "auc", "direction": "higher", "kind": "equivalence"}])], "claims.0.tests.0.kind"),
    ([_claim(tests=[{"metric": "auc", "direction": "higher", "margin": -0.1}])], "claims.0.tests.0.margin"),
    ([_claim(tests=[])], "claims.0.tests"),
    ([_claim(treatment="ngrpo")],
     "claim 'grpo_beats_rloo': treatment 'ngrpo' is not an entry label; labels: grpo, rloo"),
    ([_claim(baseline="grpo")], "treatment and baseline are the same entry 'grpo'"),
    ([CLAIM, _claim(treatment="rloo", baseline="grpo")], "claim ids repeat: ['grpo_beats_rloo']"),
    ([_claim(id="a b")], "claims.0.id"),
    ([_claim(statement="")], "claims.0.statement"),
    ([{k: v for k, v in CLAIM.items() if k != "paper"}], "claims.0.paper"),
])
def test_bad_claims_fail_clearly(tmp_path, claims, message):
    with pytest.raises(ConfigError, match="invalid arena file") as err:
        load_arena(write_arena(tmp_path / "a.yaml", claims=claims))
    assert message in str(err.value)


# --- report and gathering ----------------------------------------------------------------------------------------

def _arena_with_claims(tmp_path, name="t"):
    """grpo vs rloo over seeds 0, 1, 2 (made-up finished runs): grpo ends 0.1 higher on every seed, rloo's
    seed 0 never reaches the 0.5 target; both log the same response length."""
    tests = [{"metric": "final_accuracy", "direction": "higher"},
             {"metric": "time_to_target", "direction": "lower"},
             {"metric": "mean:response/length", "direction": "lower", "kind": "non_inferiority", "margin": 0.5}]
    claims = [_claim(tests=tests), _claim(id="rloo_beats_grpo", treatment="rloo", baseline="grpo", tests=tests[:1])]
    arena = load_arena(write_arena(tmp_path / f"{name}.yaml", name=name, seeds=[0, 1, 2], claims=claims))
    out = tmp_path / name
    for seed, base in zip((0, 1, 2), (0.2, 0.3, 0.4)):
        fake_run(out, arena, "grpo", seed, [base, base + 0.2, base + 0.3])
        fake_run(out, arena, "rloo", seed, [base, base + 0.1, base + 0.2])
    return arena, out


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    arena, out = _arena_with_claims(tmp_path_factory.mktemp("claims"))
    write_report(arena, out, "polo arena t.yaml")
    return out


def test_summary_json_claims(report):
    first, second = json.loads((report / "summary.json").read_text())["claims"]
    assert (first["id"], first["verdict"], second["verdict"]) == ("grpo_beats_rloo", INCONCLUSIVE, NOT_HELD)
    accuracy, time, length = first["tests"]
    assert accuracy["verdict"] == HELD and accuracy["seeds"] == [0, 1, 2]
    assert accuracy["diff"] == pytest.approx({"mean": 0.1, "low": 0.1, "high": 0.1}, abs=F64)
    # grpo reaches 0.5 after 4, 2, 2 s; rloo never (the 4 s cap, the longest run), 4, 2 s: d = 0, 2, 0
    assert time["treatment_by_seed"] == {"0": 4.0, "1": 2.0, "2": 2.0}
    assert time["baseline_by_seed"] == {"0": 4.0, "1": 4.0, "2": 2.0}
    assert (time["diff"]["low"], time["diff"]["high"], time["verdict"]) == (0.0, 2.0, INCONCLUSIVE)
    # power of d = 0, 2, 0: sd = sqrt(4/3) = 1.1547; MDE = (t.975,2 + t.8,2) · sd / sqrt(3) = (4.30265 + 1.06066)
    # · 0.66667 = 3.5755; its mean 2/3 is detected from n = 26 ((2.05954 + 0.85617) · 1.1547 / sqrt(26) = 0.6603,
    # n = 25: 0.6745); the accuracy test's constant d has sd 0: MDE 0, decided at 2 seeds
    assert time["mde"] == pytest.approx(3.5755, abs=1e-4) and accuracy["mde"] == pytest.approx(0.0, abs=F64)
    assert time["seeds_to_decide"] == 26 and accuracy["seeds_to_decide"] == 2
    assert time["t_interval"] == pytest.approx([2 / 3 - 2.86844, 2 / 3 + 2.86844], abs=1e-4)
    assert (length["threshold"], length["verdict"]) == (-0.5, HELD)


def test_markdown_claims_section(report):
    md = (report / "report.md").read_text()
    section = md.split("## Claims")[1].split("## Learning curves")[0]
    assert "### grpo_beats_rloo: inconclusive" in section and "### rloo_beats_grpo: not held" in section
    assert "GRPO ends with higher held-out accuracy than RLOO." in section
    assert "Paper: A paper (arXiv:0000.00000). Treatment: grpo; baseline: rloo." in section
    assert ("| final_accuracy | higher is better; superiority: d > 0 | 0.6000 | 0.5000 | +0.100 [+0.100, +0.100] "
            "| 0,1,2 | t [+0.100, +0.100]; MDE 0.000; decided | held |") in section
    # time_to_target, d = 0, 2, 0: mean 2/3 ± t.975,2 · 1.1547/sqrt(3) = 0.6667 ± 2.8684
    assert "| 0,1,2 | t [-2.202, +3.535]; MDE 3.576; ~26 seeds to decide | inconclusive |" in section
    assert "| mean:response/length | lower is better; non-inferiority: d > -0.5 |" in section
    assert "held when low > t, not held when high ≤ t" in section
    assert "**Claim verdict: inconclusive.**" in section


def test_html_claims_section(report):
    page = (report / "report.html").read_text()
    assert "<h2>Claims</h2>" in page and "<h3>rloo_beats_grpo: not held</h3>" in page
    assert page.count("<table>") == 4 + 2  # the four tables, then one per claim


def test_report_without_claims_has_no_section(tmp_path):
    arena = load_arena(write_arena(tmp_path / "a.yaml"))
    fake_run(tmp_path / "out", arena, "grpo", 0, [0.1, 0.2])
    write_report(arena, tmp_path / "out", "")
    assert "## Claims" not in (tmp_path / "out" / "report.md").read_text()
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["claims"] == []


def test_cli_gathers_claims_of_several_arenas(tmp_path, report, capsys):
    from polo.cli import main

    arena, other = _arena_with_claims(tmp_path, name="other")
    write_report(arena, other, "")
    table = tmp_path / "claims.md"
    assert main(["arena-claims", str(report), str(other), f"--out={table}"]) == 0
    lines = table.read_text().splitlines()
    assert lines[0].startswith("| claim | statement | paper | arena | treatment vs baseline |")
    rows = [line for line in lines if line.startswith("| grpo_beats_rloo") or line.startswith("| rloo_beats_grpo")]
    assert [row.split(" | ")[3] for row in rows] == ["t", "t", "other", "other"]
    assert rows[0].endswith("| inconclusive |") and rows[1].endswith("| not held |")
    assert "final_accuracy (higher, d > 0): +0.100 [+0.100, +0.100] held" in rows[0]
    assert "4 claim(s): 0 held, 2 not held, 2 inconclusive." in lines
    assert main(["arena-claims", str(report)]) == 0
    assert "| rloo_beats_grpo |" in capsys.readouterr().out


def test_cli_gathering_fails_clearly(tmp_path, capsys):
    from polo.cli import main

    assert main(["arena-claims", str(tmp_path)]) == 1
    assert "holds no arena report" in capsys.readouterr().err
    arena = load_arena(write_arena(tmp_path / "a.yaml"))
    fake_run(tmp_path / "out", arena, "grpo", 0, [0.1, 0.2])
    write_report(arena, tmp_path / "out", "")
    assert main(["arena-claims", str(tmp_path / "out")]) == 2
    assert "has no claims" in capsys.readouterr().err


def test_the_docs_example_claim_loads(tmp_path):
    docs = (Path(__file__).resolve().parents[2] / "docs" / "arena.md").read_text()
    block = docs.split("```yaml\nclaims:")[1].split("```")[0]
    claims = yaml.safe_load("claims:" + block)["claims"]
    arena = load_arena(write_arena(tmp_path / "a.yaml", entries=[{"recipe": "ngrpo"}, {"recipe": "grpo"}],
                                   claims=claims))
    assert [t.metric for t in arena.file.claims[0].tests] == ["final_accuracy", "mean:response/length"]
