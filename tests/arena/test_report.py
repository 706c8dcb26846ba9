"""The report of a made-up arena whose numbers are known."""
import json
import re

import pytest

from polo.arena import write_report
from polo.arena.curves import curve, smooth
from polo.arena.summary import ACCURACY, RunResult

from .helpers import fake_arena

F64 = 1e-12
"""Absolute tolerance of float64 statistics (means, percentiles, interpolation) of a few values of magnitude
≤ 3: a sum of n terms errs by at most n·eps64·max|x| (eps64 = 2.2e-16), far under 1e-12."""


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    arena, out = fake_arena(tmp_path_factory.mktemp("report"))
    return write_report(arena, out, "polo arena a.yaml"), out


def test_summary_numbers(report):
    _, out = report
    summary = {e["label"]: e for e in json.loads((out / "summary.json").read_text())["entries"]}
    grpo, rloo = summary["grpo"], summary["rloo"]
    assert grpo["final_accuracy"]["mean"] == pytest.approx(0.6, abs=F64)
    assert rloo["final_accuracy"]["mean"] == pytest.approx(0.5, abs=F64)
    assert (grpo["rank"], grpo["tier"], rloo["rank"], rloo["tier"]) == (1, 1, 2, 2)  # +0.1 on every seed
    assert rloo["vs_best"]["mean"] == pytest.approx(-0.1, abs=F64) and rloo["vs_best"]["p_value"] == 0.0
    assert (grpo["time_to_target_s"], grpo["reached"]) == (2.0, 3)  # 4 s, 2 s, 2 s
    assert (rloo["time_to_target_s"], rloo["reached"]) == (4.0, 2)  # never, 4 s, 2 s
    assert grpo["diagnostics"]["clip_frac"] == pytest.approx(0.03, abs=F64)
    assert summary["grpo"]["seeds"] == [0, 1, 2] and not json.loads((out / "summary.json").read_text())["missing"]


def test_markdown_has_tables_and_figures(report):
    _, out = report
    md = (out / "report.md").read_text()
    assert "## Ranking by final accuracy" in md and "## Results per entry" in md
    assert "| grpo | grpo | 0,1,2 | 0.600 [0.500, 0.700] | 3/3 seeds reached; median 2 s |" in md
    assert "| rloo | rloo | 0,1,2 | 0.500 [0.400, 0.600] | 2/3 seeds reached; median 4 s |" in md
    assert "## Results per seed" in md and "## What differs between entries" in md
    assert "bootstrap test of the difference" in md
    for name in re.findall(r"\]\((figures/[^)]+\.png)\)", md):
        assert (out / name).stat().st_size > 1000
    assert len(re.findall(r"!\[", md)) == 4


def test_html_is_self_contained(report):
    _, out = report
    page = (out / "report.html").read_text()
    assert page.count("src='data:image/png;base64,") == 4 and page.count("<table>") == 4
    assert "<td>rloo</td><td>0</td><td>0.200</td><td>0.400</td><td>+0.200</td><td>not reached</td>" in page
    assert not re.search(r"(src|href)=['\"]?(https?:|//|file:)", page)
    assert "<table>" in page and "grpo" in page


def test_curves_mean_and_band():
    a = RunResult("x", 0, [{"step": 0, ACCURACY: 0.2}, {"step": 2, "elapsed_s": 2.0, ACCURACY: 0.4}])
    b = RunResult("x", 1, [{"step": 0, ACCURACY: 0.4}, {"step": 2, "elapsed_s": 4.0, ACCURACY: 0.6}])
    by_step = curve([a, b], ACCURACY, "step")
    assert by_step.x.tolist() == [0, 2] and by_step.mean == pytest.approx([0.3, 0.5], abs=F64)
    assert by_step.low == pytest.approx([0.2, 0.4], abs=F64) and by_step.high == pytest.approx([0.4, 0.6], abs=F64)
    by_time = curve([a, b], ACCURACY, "elapsed_s")  # ends with the shorter run, at 2 s, where b is half-way
    assert by_time.x[0] == 0 and by_time.x[-1] == 2.0
    assert by_time.mean[0] == pytest.approx(0.3, abs=F64) and by_time.mean[-1] == pytest.approx(0.45, abs=F64)
    assert (by_time.low[-1], by_time.high[-1]) == pytest.approx((0.4, 0.5), abs=F64)


def test_smooth_keeps_constants_and_length():
    import numpy as np

    y = np.full(10, 3.0)
    assert np.allclose(smooth(y, 3), y, rtol=0, atol=F64)
    assert len(smooth(np.arange(7.0), 4)) == 7


def test_cli_report_only_writes_the_report_of_finished_runs(tmp_path):
    from polo.cli import main

    arena, out = fake_arena(tmp_path)
    assert main(["arena", str(arena.source), f"--out={out}", "--report-only"]) == 0
    assert "--report-only" in (out / "report.md").read_text()
    assert (out / "report.html").is_file()
