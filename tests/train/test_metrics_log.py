"""metrics.jsonl after a kill: a partial last line is skipped by readers and dropped by a resume."""
import json

import pytest

from polo.train.metrics import MetricsError, MetricsLog, read_metrics


def write_rows(path, steps, tail=""):
    path.write_text("".join(json.dumps({"step": s, "reward": s / 10}) + "\n" for s in steps) + tail)


def test_a_partial_last_line_is_skipped_and_dropped_on_resume(tmp_path):
    path = tmp_path / "metrics.jsonl"
    write_rows(path, [1, 2, 3], tail='{"step": 4, "rew')
    assert [r["step"] for r in read_metrics(tmp_path)] == [1, 2, 3]
    log = MetricsLog(path)
    log.truncate_after(2)
    log.write({"step": 3, "reward": 0.5})
    assert [r["step"] for r in read_metrics(path)] == [1, 2, 3]
    assert path.read_text().endswith('"reward": 0.5}\n') and list(tmp_path.iterdir()) == [path]


@pytest.mark.parametrize("damage, message", [
    ('{"step": 2, "rew\n', r"metrics.jsonl:3: damaged metrics line \(not JSON\)"),
    ('[1, 2]\n', r"metrics.jsonl:3: damaged .*integer step"),
    ('{"step": "2"}\n', r"metrics.jsonl:3: damaged .*integer step"),
])
def test_a_damaged_line_before_the_end_is_an_error_naming_it(tmp_path, damage, message):
    path = tmp_path / "metrics.jsonl"
    write_rows(path, [0, 1], tail=damage + json.dumps({"step": 3}) + "\n")
    with pytest.raises(MetricsError, match=message):
        read_metrics(path)
