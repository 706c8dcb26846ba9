"""The callbacks a recipe turns on through its settings, in the order they run (before any the caller passes)."""
from __future__ import annotations

from polo.train.agent_metrics import AgentMetrics
from polo.train.backends import backend_callbacks
from polo.train.callbacks import Callback
from polo.train.export import FinalExport
from polo.train.run_warnings import TruncationWarning
from polo.train.samples import SampleLog
from polo.train.trl_metrics import TrlMetrics


def builtin_callbacks(recipe) -> list[Callback]:
    """Episode metrics (multi-turn runs), TRL-named metrics, the sample table (``train.log_samples_every``), the
    logging backends (``train.report_to``), the truncation warning and the final export to ``RUN/final``."""
    t = recipe.train
    samples = [SampleLog(t.log_samples_every, t.log_samples)] if t.log_samples_every else []
    return [AgentMetrics(), TrlMetrics(), *samples, *backend_callbacks(t.report_to), TruncationWarning(), FinalExport()]
