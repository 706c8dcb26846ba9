"""The figures draw a thin line per seed under each entry's mean and band."""
import pytest

from polo.arena.curves import series
from polo.arena.plots import SEED_LINE, draw, figures
from polo.arena.report import collect
from polo.arena.summary import ACCURACY, REWARD

from .helpers import fake_arena


@pytest.fixture(scope="module")
def entries(tmp_path_factory):
    arena, out = fake_arena(tmp_path_factory.mktemp("plots"))
    return collect(arena, out)[0]


@pytest.mark.parametrize("key, x_key, smoothed", [(ACCURACY, "step", False), (REWARD, "elapsed_s", True)])
def test_one_thin_line_per_seed_and_a_mean_per_entry(entries, key, x_key, smoothed):
    ax = draw(entries, key, x_key, smoothed, "t", None).axes[0]
    lines = {line.get_gid(): line for line in ax.get_lines()}
    seeds = {f"{label}_s{seed}" for label in ("grpo", "rloo") for seed in (0, 1, 2)}
    assert set(lines) == seeds | {"grpo_mean", "rloo_mean"}
    for entry in entries:
        for run in entry.runs:
            line = lines[f"{entry.label}_s{run.seed}"]
            x, y = series(run, key, x_key, smoothed)
            assert line.get_xdata().tolist() == x.tolist() and line.get_ydata().tolist() == y.tolist()
            assert line.get_linewidth() == SEED_LINE["lw"] < lines[f"{entry.label}_mean"].get_linewidth()
            assert line.get_color() == lines[f"{entry.label}_mean"].get_color()


def test_seed_lines_of_an_accuracy_figure(entries):
    ax = draw(entries, ACCURACY, "step", False, "t", 0.5).axes[0]
    grpo_s0 = next(line for line in ax.get_lines() if line.get_gid() == "grpo_s0")
    assert grpo_s0.get_ydata().tolist() == [0.2, 0.4, 0.5]  # fake_arena: base 0.2, +0.2, +0.3


def test_svg_has_an_element_per_seed_line(entries, tmp_path):
    path = tmp_path / "curves.svg"
    draw(entries, ACCURACY, "step", False, "t", 0.5).savefig(path, format="svg")
    svg = path.read_text()
    assert sum(svg.count(f'id="{label}_s{seed}"') for label in ("grpo", "rloo") for seed in (0, 1, 2)) == 6


def test_every_figure_is_a_png(entries):
    assert [f.png[:8] for f in figures(entries, 0.5)] == [b"\x89PNG\r\n\x1a\n"] * 4
