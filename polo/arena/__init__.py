"""Arena: side-by-side comparison of recipes over seeds (``polo arena ARENA.yaml``).

``spec`` reads and validates arena files, ``runner`` trains every (entry, seed) pair in a pool of worker
processes (resumably), ``stats`` holds the bootstrap statistics, ``summary``/``curves`` turn run folders
into numbers, ``tables``/``plots``/``report`` write ``report.md`` and a self-contained ``report.html``.
"""
from polo.arena.report import write_report
from polo.arena.runner import run_arena
from polo.arena.spec import Arena, load_arena

__all__ = ["Arena", "load_arena", "run_arena", "write_report"]
