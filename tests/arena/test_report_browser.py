"""report.html in headless Chromium: it renders, its figures decode, and no script error happens."""
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from polo.arena import write_report

from .helpers import fake_arena

CHROMIUM = next((p for p in (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")) if p), None)
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium not found (apt-get install -y chromium)")


def dump_dom(page: Path, profile: Path) -> tuple[str, str]:
    """The DOM after load (stdout) and the browser's log (stderr, console messages included)."""
    argv = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0", "--dump-dom", page.as_uri()]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout, done.stderr


def html_tag(dom: str) -> str:
    """The root element's start tag, where the page's probe script writes its attributes."""
    return re.search(r"<html[^>]*>", dom).group(0)


def test_report_renders_with_figures_and_no_errors(tmp_path):
    arena, out = fake_arena(tmp_path)
    write_report(arena, out, "polo arena a.yaml")
    dom, log = dump_dom(out / "report.html", tmp_path / "profile")
    assert "<h1>Arena" in dom and dom.count("<table>") == 4 and "grpo" in dom
    assert len(re.findall(r"<img [^>]*src=\"data:image/png;base64,", dom)) == 4
    root = html_tag(dom)
    assert 'data-figures-decoded="4"' in root, "the browser did not decode the 4 figures"
    assert "data-errors" not in root
    assert "Uncaught" not in log


def test_error_probe_catches_a_broken_page(tmp_path):
    arena, out = fake_arena(tmp_path)
    page = write_report(arena, out, "")
    text = (out / "report.html").read_text().replace("</body>", "<script>no_such_function()</script></body>")
    broken = out / "broken.html"
    broken.write_text(text)
    dom, log = dump_dom(broken, tmp_path / "profile")
    root = html_tag(dom)
    assert "data-errors=" in root and "no_such_function" in root
    assert "Uncaught" in log
    assert page.figures
