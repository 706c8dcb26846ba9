"""The arena report: ``report.md`` (with PNGs beside it), a self-contained ``report.html`` (figures inlined
as base64, no external resource) and ``summary.json``, built from the finished run folders."""
from __future__ import annotations

import base64
import html
import json
import time
from dataclasses import dataclass
from pathlib import Path

from polo.arena.claims import ClaimResult, evaluate_claims
from polo.arena.claims_report import CLAIMS_NOTE, claim_intro, claim_table, claims_json
from polo.arena.configs import config_differences
from polo.arena.plots import Figure, figures
from polo.arena.runner import is_done, run_dir
from polo.arena.spec import Arena
from polo.arena.summary import EntrySummary, Ranked, RunResult, rank_entries, summarize_entry
from polo.arena.tables import Table, config_table, ranking_table, results_table, seeds_table
from polo.train.metrics import read_metrics


CURVES_NOTE = ("Thin lines: each seed's run, whole. Thick line and shaded band: the mean over seeds with a 95 % "
               "bootstrap band; each seed is interpolated onto a common grid that ends where the entry's shortest "
               "run ends. Rewards are smoothed per seed (centred moving average). "
               "Training time is the runs' elapsed_s (model loading excluded, evaluations included).")


@dataclass
class Report:
    arena: Arena
    command: str
    entries: list[EntrySummary]
    ranked: list[Ranked]
    missing: list[str]
    tables: list[Table]
    figures: list[Figure]
    claims: list[ClaimResult]


def collect(arena: Arena, out: Path) -> tuple[list[EntrySummary], list[str]]:
    """Summaries of every entry from its finished (``DONE``) runs, and the names of the runs missing."""
    entries, missing = [], []
    for label in arena.labels:
        runs = []
        for spec in arena.runs_of(label):
            path = run_dir(out, spec)
            if is_done(path):
                runs.append(RunResult(label, spec.seed, read_metrics(path), arena.file.metric))
            else:
                missing.append(spec.name)
        entries.append(summarize_entry(label, runs, arena.file.target_value))
    return entries, missing


def build_report(arena: Arena, out: Path, command: str) -> Report:
    entries, missing = collect(arena, out)
    ranked = rank_entries(entries)
    recipes = {e.label: " ".join([e.recipe, *e.overrides]) for e in arena.file.resolved_entries()}
    target = arena.file.target_value
    metric = arena.file.metric
    tables = [ranking_table(ranked, len(arena.file.seeds), metric), results_table(entries, recipes, target, metric),
              seeds_table(entries, target, metric), config_table(config_differences(arena), list(arena.labels))]
    claims = evaluate_claims(arena.file.claims, entries, target)
    return Report(arena, command, entries, ranked, missing, tables, figures([e for e in entries if e.runs], target,
                                                                                  arena.file.metric),
                  claims)


def _settings(report: Report) -> list[tuple[str, str]]:
    f = report.arena.file
    recipe = report.arena.runs[0].load()  # after command-line overrides
    if report.arena.runs[0].control:
        steps, minutes = f"{recipe.method.iterations} iterations", recipe.max_minutes
    else:
        steps, minutes = f"{recipe.train.steps} steps", recipe.train.max_minutes
    budget = steps + (f" or {minutes:g} minutes of training" if minutes else "")
    return [("arena file", str(report.arena.source)), ("command", report.command),
            ("seeds", ", ".join(map(str, f.seeds))), ("budget per run", budget),
            ("overrides of every run", " ".join(report.arena.shared_overrides) + " seed=<seed>"),
            ("metric", f.metric), ("target", f"{f.target_value:g}"), ("written", time.strftime("%Y-%m-%d %H:%M:%S"))]


def md_grid(header: list[str], rows: list[list[str]]) -> list[str]:
    """The lines of a Markdown table (``|`` in a cell escaped)."""
    cell = lambda s: s.replace("|", "\\|")  # noqa: E731
    lines = ["| " + " | ".join(map(cell, header)) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(map(cell, row)) + " |" for row in rows]


def _md_table(t: Table) -> str:
    return "\n".join([f"## {t.title}", "", *md_grid(t.header, t.rows), "", t.note, ""])


def _md_claims(claims: list[ClaimResult]) -> list[str]:
    parts = ["## Claims", "", CLAIMS_NOTE, ""]
    for c in claims_json(claims):
        t = claim_table(c)
        parts += [f"### {t.title}", ""] + [line for p in claim_intro(c) for line in (p, "")]
        parts += [*md_grid(t.header, t.rows), "", f"**{t.note}**", ""]
    return parts


def render_markdown(report: Report, figure_dir: str) -> str:
    f = report.arena.file
    parts = [f"# Arena `{f.name}`", "", f.description, ""]
    parts += [f"- **{k}**: `{v}`" if k in ("command", "overrides of every run") else f"- **{k}**: {v}"
              for k, v in _settings(report)]
    if report.missing:
        parts += ["", f"**Missing runs (not finished, left out):** {', '.join(report.missing)}"]
    parts.append("")
    parts += [_md_table(t) for t in report.tables]
    parts += _md_claims(report.claims) if report.claims else []
    parts += ["## Learning curves", "", CURVES_NOTE, ""]
    parts += [f"![{fig.title}]({figure_dir}/{fig.stem}.png)" for fig in report.figures]
    return "\n".join(parts) + "\n"


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2em auto;max-width:1200px;color:#222;padding:0 1em}
table{border-collapse:collapse;margin:.5em 0;font-size:13px}th,td{border:1px solid #ccc;padding:3px 7px;text-align:right}
th{background:#f3f3f3}td:nth-child(-n+2){text-align:left}.note{color:#555;font-size:12px;max-width:1100px}
.figs{display:flex;flex-wrap:wrap;gap:8px}.figs img{max-width:49%;border:1px solid #eee}code{background:#f5f5f5;padding:1px 3px}
"""
_ERROR_HOOK = """
window.onerror=function(m,s,l,c){var e=document.documentElement;
e.setAttribute('data-errors',(e.getAttribute('data-errors')||'')+m+' @'+l+':'+c+';');};
window.addEventListener('load',function(){var n=0;document.querySelectorAll('img').forEach(function(i){
if(i.complete&&i.naturalWidth>0)n++;});document.documentElement.setAttribute('data-figures-decoded',String(n));});
"""
"""Records uncaught errors into ``data-errors`` and, once loaded, the number of figures the browser decoded
into ``data-figures-decoded``: both show in a headless browser's DOM dump."""


def _html_grid(t: Table) -> str:
    e = html.escape
    head = "".join(f"<th>{e(h)}</th>" for h in t.header)
    body = "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>" for row in t.rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _html_table(t: Table) -> str:
    e = html.escape
    return f"<h2>{e(t.title)}</h2>{_html_grid(t)}<p class='note'>{e(t.note)}</p>"


def _html_claims(claims: list[ClaimResult]) -> str:
    e = html.escape
    out = f"<h2>Claims</h2><p class='note'>{e(CLAIMS_NOTE)}</p>"
    for c in claims_json(claims):
        t = claim_table(c)
        out += (f"<h3>{e(t.title)}</h3>" + "".join(f"<p>{e(p)}</p>" for p in claim_intro(c))
                + f"{_html_grid(t)}<p><b>{e(t.note)}</b></p>")
    return out


def render_html(report: Report) -> str:
    e = html.escape
    f = report.arena.file
    settings = "".join(f"<li><b>{e(k)}</b>: <code>{e(v)}</code></li>" for k, v in _settings(report))
    missing = (f"<p><b>Missing runs (not finished, left out):</b> {e(', '.join(report.missing))}</p>"
               if report.missing else "")
    figs = "".join(f"<img alt='{e(fig.title)}' title='{e(fig.title)}' "
                   f"src='data:image/png;base64,{base64.b64encode(fig.png).decode()}'>" for fig in report.figures)
    return (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>Arena {e(f.name)}</title>"
            f"<script>{_ERROR_HOOK}</script><style>{_CSS}</style></head><body>"
            f"<h1>Arena <code>{e(f.name)}</code></h1><p>{e(f.description)}</p><ul>{settings}</ul>{missing}"
            + "".join(_html_table(t) for t in report.tables)
            + (_html_claims(report.claims) if report.claims else "")
            + f"<h2>Learning curves</h2><p class='note'>{e(CURVES_NOTE)}</p>"
              f"<div class='figs'>{figs}</div></body></html>\n")


def summary_json(report: Report) -> dict:
    return {
        "arena": report.arena.file.name,
        "target_accuracy": report.arena.file.target_value,
        "metric": report.arena.file.metric,
        "missing": report.missing,
        "entries": [{
            "label": r.entry.label, "rank": r.rank, "tier": r.tier, "seeds": r.entry.seeds,
            "final_accuracy": vars(r.entry.final_accuracy),
            "final_accuracy_by_seed": r.entry.accuracy_by_seed(),
            "time_to_target_s": r.entry.time_to_target, "reached": r.entry.reached,
            "vs_best": None if r.vs_best is None else {**vars(r.vs_best.diff), "p_value": r.vs_best.p_value},
            "diagnostics": r.entry.diagnostics,
        } for r in report.ranked],
        "claims": claims_json(report.claims),
    }


def write_report(arena: Arena, out: Path, command: str = "") -> Report:
    """Write ``report.md``, ``figures/*.png``, ``report.html`` and ``summary.json`` into ``out``."""
    out = Path(out)
    report = build_report(arena, out, command)
    (out / "figures").mkdir(parents=True, exist_ok=True)
    for fig in report.figures:
        (out / "figures" / f"{fig.stem}.png").write_bytes(fig.png)
    (out / "report.md").write_text(render_markdown(report, "figures"))
    (out / "report.html").write_text(render_html(report))
    (out / "summary.json").write_text(json.dumps(summary_json(report), indent=2) + "\n")
    return report
