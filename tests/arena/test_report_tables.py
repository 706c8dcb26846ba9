"""The per-seed table, the time-to-target wording and the table of settings that differ between entries."""
import pytest

from polo.arena import load_arena, write_report
from polo.arena.configs import config_differences
from polo.arena.summary import ACCURACY, RunResult, summarize_entry
from polo.arena.tables import config_table, fmt_time

from .helpers import fake_arena, write_arena


@pytest.fixture(scope="module")
def markdown(tmp_path_factory):
    arena, out = fake_arena(tmp_path_factory.mktemp("tables"))
    write_report(arena, out, "polo arena a.yaml")
    return (out / "report.md").read_text()


def test_per_seed_rows_have_warm_start_final_and_gain(markdown):
    assert "| entry | seed | warm-start acc. | final acc. | gain | time to 0.5 |" in markdown
    for row in ("| grpo | 0 | 0.200 | 0.500 | +0.300 | 4 s |", "| grpo | 2 | 0.400 | 0.700 | +0.300 | 2 s |",
                "| rloo | 0 | 0.200 | 0.400 | +0.200 | not reached |", "| rloo | 1 | 0.300 | 0.500 | +0.200 | 4 s |"):
        assert row in markdown


def test_warm_start_is_the_step_0_evaluation_only():
    rows = [{"step": 0, ACCURACY: 0.25}, {"step": 5, "elapsed_s": 3.0, ACCURACY: 0.75}]
    assert RunResult("x", 0, rows).warm_accuracy == 0.25
    assert RunResult("x", 0, rows[1:]).warm_accuracy is None  # a run without its step-0 evaluation


def _entry(*times_to_half: float | None):
    """An entry with one run per item: it reaches 0.5 after that many seconds, or never (None)."""
    runs = []
    for seed, t in enumerate(times_to_half):
        rows = [{"step": 0, ACCURACY: 0.1}, {"step": 1, "elapsed_s": t or 9.0, ACCURACY: 0.1 if t is None else 0.6}]
        runs.append(RunResult("x", seed, rows))
    return summarize_entry("x", runs, 0.5)


@pytest.mark.parametrize("times, cell", [
    ((40.6, 12.0, 41.0), "3/3 seeds reached; median 41 s"),
    ((None, 12.0, 41.0), "2/3 seeds reached; median 41 s"),
    ((None, 12.0, None), "1/3 seeds reached; median not reached"),
    ((None, None, None), "0/3 seeds reached"),
    ((None, 30.0), "1/2 seeds reached; median not reached"),
])
def test_time_to_target_cell(times, cell):
    assert fmt_time(_entry(*times)) == cell


def test_config_table_lists_only_settings_that_differ(tmp_path, markdown):
    arena = load_arena(write_arena(tmp_path / "v.yaml", entries=[], recipe="grpo", variants=[
        {"label": "lo", "overrides": ["optim.lr=1e-4"]}, {"label": "hi", "overrides": ["optim.lr=1e-3"]},
        {"label": "same"}]))
    table = config_table(config_differences(arena), list(arena.labels))
    assert table.header == ["setting", "lo", "hi", "same"]
    assert table.rows == [["optim.lr", "0.0001", "0.001", "0.0005"]]  # seed, steps, every other setting: equal


def test_config_table_of_two_recipes(markdown):
    section = markdown.split("## What differs between entries")[1].split("## ")[0]
    assert "| setting | grpo | rloo |" in section
    assert "| advantage.name | grpo | rloo |" in section
    assert "| advantage.scale_by_std | true | (absent) |" in section
    for shared in ("| optim.lr ", "| seed ", "| train.steps ", "| description "):
        assert shared not in section


def test_config_table_of_identical_entries_says_so(tmp_path):
    arena = load_arena(write_arena(tmp_path / "same.yaml", entries=[{"recipe": "grpo"},
                                                                    {"recipe": "grpo", "label": "again"}]))
    table = config_table(config_differences(arena), list(arena.labels))
    assert table.rows == [] and table.note.endswith("No setting differs.")
