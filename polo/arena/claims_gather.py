"""``polo arena-claims OUT ...``: the claims of several arena output folders in one Markdown table (for
docs/results.md), read from the ``summary.json`` each folder's arena report wrote."""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from polo.arena.claims import HELD, INCONCLUSIVE, NOT_HELD
from polo.arena.claims_report import gathered_table
from polo.arena.report import md_grid
from polo.core.registry import ConfigError


def read_claims(folder: str | Path) -> list[tuple[str, dict]]:
    """``(arena name, claim record)`` of every claim in ``folder/summary.json``; an error when the folder has
    no report or its report has no claims."""
    path = Path(folder) / "summary.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: {folder} holds no arena report (write one with "
                                f"`polo arena ARENA --out {folder} --report-only`)")
    summary = json.loads(path.read_text())
    if not summary.get("claims"):
        raise ConfigError(f"{path} has no claims: its arena file has no 'claims', or the report was written "
                          f"before it had (rewrite it with `polo arena ARENA --out {folder} --report-only`)")
    return [(summary["arena"], claim) for claim in summary["claims"]]


def gather_markdown(folders: list[str | Path]) -> str:
    """The table of every claim of ``folders`` in order, a tally of the verdicts and the rule."""
    claims = [c for folder in folders for c in read_claims(folder)]
    table = gathered_table(claims)
    tally = Counter(c["verdict"] for _, c in claims)
    counts = ", ".join(f"{tally[v]} {v}" for v in (HELD, NOT_HELD, INCONCLUSIVE))
    return "\n".join([*md_grid(table.header, table.rows), "", f"{len(claims)} claim(s): {counts}.", "",
                      table.note, ""])
