"""The HTML report in a real browser: headless Chromium loads ``index.html``, every SVG renders
with a size and content, and the page fetches nothing (skipped where Chromium is absent).

The page is a copy of the report with one probe script appended (the report itself has no
scripts): after load it writes, into the DOM Chromium dumps, each ``<svg>``'s rendered size
and element count and every resource the page fetched. ``scripts/screenshot-report.sh``
then renders the real page to a PNG.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from kvverify import reports

from test_timeline import write_seed_report

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = os.environ.get("CHROMIUM") or next(
    (p for p in (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")) if p), None)
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium not installed "
                                "(Debian: apt-get install chromium)")

PROBE = """<script>
window.addEventListener('load', () => {
  const svgs = [...document.querySelectorAll('svg')].map(s => {
    const r = s.getBoundingClientRect();
    return {w: r.width, h: r.height, elements: s.querySelectorAll('*').length,
            complete: typeof s.getBBox === 'function' && s.getBBox().width > 0};
  });
  const fetched = performance.getEntriesByType('resource').map(e => e.name);
  const out = document.createElement('pre');
  out.id = 'kvverify-probe';
  out.textContent = JSON.stringify({svgs, fetched, title: document.title});
  document.body.appendChild(out);
});
</script>"""


def chromium(*args: str, timeout: int = 120) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    return subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                           "--disable-extensions", "--host-resolver-rules=MAP * ~NOTFOUND", *args],
                          capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("reports")
    write_seed_report(where)
    reports.render_index(where)
    return where


def test_page_references_nothing_on_the_network(report_dir: Path) -> None:
    page = (report_dir / "index.html").read_text()
    urls = set(re.findall(r"""(?:src|href|url)\s*[=(]\s*["']?([a-z]+:)""", page, re.I))
    assert not urls - {"file:"}, urls
    assert "http" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")


def test_page_loads_and_svgs_render(report_dir: Path, tmp_path: Path) -> None:
    probe_page = report_dir / "probe.html"
    probe_page.write_text((report_dir / "index.html").read_text().replace("</body>", PROBE + "</body>"))
    done = chromium(f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=5000",
                    "--window-size=1280,2000", "--dump-dom", probe_page.as_uri())
    assert done.returncode == 0, done.stderr[-2000:]
    m = re.search(r'<pre id="kvverify-probe">(.*?)</pre>', done.stdout, re.S)
    assert m, "the page did not finish loading: " + done.stdout[-500:]
    import html
    probe = json.loads(html.unescape(m.group(1)))
    assert probe["title"].startswith("kvverify reports (1)")
    assert probe["fetched"] == []  # nothing fetched: no image, font, style or script from anywhere
    assert len(probe["svgs"]) == 2  # the overview and the report's timeline
    for svg in probe["svgs"]:
        assert svg["w"] >= 300 and svg["h"] >= 100 and svg["elements"] >= 10 and svg["complete"], svg


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_screenshot_script(report_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "index.png"
    done = subprocess.run(["bash", str(ROOT / "scripts" / "screenshot-report.sh"), str(report_dir / "index.html"),
                           str(out), "1280x1600"], capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stderr
    assert png_size(out) == (1280, 1600) and out.stat().st_size > 20_000  # not a blank page
    svg = next(report_dir.glob("test_*.svg"))
    done = subprocess.run(["bash", str(ROOT / "scripts" / "screenshot-report.sh"), str(svg), str(tmp_path / "t.png")],
                          capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stderr
    width, height = png_size(tmp_path / "t.png")
    assert width == 960 and height > 300
    missing = subprocess.run(["bash", str(ROOT / "scripts" / "screenshot-report.sh"), str(tmp_path / "nope.html")],
                             capture_output=True, text=True, timeout=60, check=False)
    assert missing.returncode == 2 and "no such file" in missing.stderr
