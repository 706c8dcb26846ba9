"""Arena: side-by-side comparison of recipes over seeds (``polo arena ARENA.yaml``).

``spec`` reads and validates arena files, ``runner`` trains every (entry, seed) pair in a pool of worker
processes (resumably), ``stats`` holds the bootstrap statistics, ``summary``/``curves`` turn run folders
into numbers, ``configs`` finds the settings that differ between entries, ``tables``/``plots``/``report``
write ``report.md`` and a self-contained ``report.html``. The arena file format: ``docs/arena.md``.
"""
from polo.arena.report import write_report
from polo.arena.runner import run_arena
from polo.arena.spec import Arena, load_arena

__all__ = ["Arena", "load_arena", "run_arena", "write_report"]
