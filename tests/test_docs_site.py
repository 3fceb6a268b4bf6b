"""The docs site as a reader sees it at 1280 px: headless Chromium renders every page of
a fresh ``mkdocs build`` and a script in each page measures the layout.

No broker. Needs Chromium (Debian's ``chromium``; ``.ci/run`` installs it): without it the
tests skip on a developer's machine and fail in CI. ``AIOSTREAM_KAFKA_SCREENSHOTS=DIR``
also saves a full-page PNG of each page there, to look at.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

# Builds the site and drives Chromium: tens of seconds, so not in `make test-fast`.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
WIDTH = 1280


def _pages() -> list[str]:
    """Every page of the site (each takes Chromium about 2 s)."""
    docs = ROOT / "docs"
    pages = []
    for md in sorted(docs.rglob("*.md")):
        rel = md.relative_to(docs).with_suffix("")
        if not rel.parts[0].startswith("_"):
            pages.append("index.html" if str(rel) == "index" else f"{rel.as_posix()}/index.html")
    return pages


PAGES = _pages()

#: Runs in the page once it has loaded (images included) and leaves its findings, as JSON,
#: in a <pre id="layout-probe"> that --dump-dom prints.
PROBE = """
<script>
window.addEventListener("load", function () {
  var vw = document.documentElement.clientWidth;
  var name = function (el) {
    var text = (el.textContent || "").replace(/\\s+/g, " ").trim().slice(0, 60);
    return el.tagName.toLowerCase() + ": " + text;
  };
  var out = {viewport: vw, beyond: [], scrolling: [], wrapped_code: [], wrapped_names: [],
             broken_images: [], text: document.body.innerText.slice(0, 20000)};
  document.querySelectorAll(".md-content *").forEach(function (el) {
    var r = el.getBoundingClientRect();
    if (r.width > 0 && r.right > vw + 1) out.beyond.push(name(el));
  });
  document.querySelectorAll(
    ".md-content pre > code, .md-content .md-typeset__scrollwrap, .md-content table"
  ).forEach(function (el) {
    if (el.scrollWidth > el.clientWidth + 1) out.scrolling.push(name(el));
  });
  document.querySelectorAll(".md-content pre > code").forEach(function (el) {
    var lines = el.textContent.replace(/\\n$/, "").split("\\n").length;
    var lh = parseFloat(getComputedStyle(el).lineHeight);
    var cs = getComputedStyle(el);
    var h = el.clientHeight - parseFloat(cs.paddingTop) - parseFloat(cs.paddingBottom);
    if (h > lines * lh + lh / 2) out.wrapped_code.push(name(el));
  });
  document.querySelectorAll(".md-content td:first-child > code").forEach(function (el) {
    if (el.getClientRects().length > 1) out.wrapped_names.push(el.textContent);
  });
  document.querySelectorAll(".md-content img").forEach(function (el) {
    if (!el.complete || el.naturalWidth === 0) out.broken_images.push(el.getAttribute("src"));
  });
  var pre = document.createElement("pre");
  pre.id = "layout-probe";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>
"""


def _require(ok: bool, reason: str) -> None:
    if not ok:
        if os.environ.get("CI"):
            pytest.fail(f"{reason} (CI: .ci/run installs it)")
        pytest.skip(reason)


def _chromium() -> str:
    found = os.environ.get("CHROMIUM") or shutil.which("chromium")
    found = found or shutil.which("chromium-browser") or shutil.which("google-chrome")
    _require(found is not None, "Chromium is not installed (Debian: apt-get install chromium)")
    assert found is not None
    return found


def _run_chromium(chromium: str, profile: Path, *args: str) -> str:
    result = subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            f"--user-data-dir={profile}",
            "--virtual-time-budget=10000",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    _chromium()
    _require((Path(sys.executable).parent / "mkdocs").exists(), "the docs extra is not installed")
    out = tmp_path_factory.mktemp("site")
    result = subprocess.run(
        [str(Path(sys.executable).parent / "mkdocs"), "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return out


@pytest.fixture(scope="module")
def layouts(site: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Page -> what the probe found, at a 1280 px wide window."""
    chromium = _chromium()
    profile = tmp_path_factory.mktemp("chromium-profile")
    shots = os.environ.get("AIOSTREAM_KAFKA_SCREENSHOTS")
    found: dict[str, dict[str, Any]] = {}
    for page in PAGES:
        source = site / page
        html = source.read_text(encoding="utf-8")
        assert "</body>" in html, page
        probe = source.with_name("layout-probe.html")
        probe.write_text(html.replace("</body>", PROBE + "</body>"), encoding="utf-8")
        dom = _run_chromium(
            chromium, profile, f"--window-size={WIDTH},900", "--dump-dom", probe.as_uri()
        )
        match = re.search(r'<pre id="layout-probe">(.*?)</pre>', dom, re.S)
        assert match, f"{page}: the probe did not run:\n{dom[-2000:]}"
        text = match.group(1).replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
        found[page] = json.loads(text)
        if shots:
            Path(shots).mkdir(parents=True, exist_ok=True)
            stem = page.removesuffix("index.html").strip("/").replace("/", "-") or "index"
            png = Path(shots) / f"{stem}.png"
            _run_chromium(
                chromium,
                profile,
                f"--window-size={WIDTH},2400",
                f"--screenshot={png}",
                source.as_uri(),
            )
    return found


@pytest.mark.parametrize("page", PAGES)
def test_nothing_is_cut_off_at_1280_px(layouts: dict[str, dict[str, Any]], page: str) -> None:
    found = layouts[page]
    assert found["viewport"] >= WIDTH - 20, found["viewport"]  # a scroll bar at most
    assert not found["beyond"], f"{page}: past the right edge of the window: {found['beyond']}"
    assert not found["scrolling"], f"{page}: scrolls sideways: {found['scrolling']}"
    assert not found["broken_images"], f"{page}: images not shown: {found['broken_images']}"


@pytest.mark.parametrize("page", ["index.html", "getting-started/index.html"])
def test_first_pages_code_fits_without_wrapping(
    layouts: dict[str, dict[str, Any]], page: str
) -> None:
    """Longer code lines wrap rather than hide (the site's CSS); on the pages read first
    every line fits as written."""
    assert not layouts[page]["wrapped_code"], layouts[page]["wrapped_code"]


def test_option_names_do_not_wrap(layouts: dict[str, dict[str, Any]]) -> None:
    wrapped = layouts["configuration/index.html"]["wrapped_names"]
    assert not wrapped, f"option names broken over lines: {wrapped}"


def test_no_theme_notice_and_the_benchmarks_page_leads_with_its_summary(
    layouts: dict[str, dict[str, Any]],
) -> None:
    for page, found in layouts.items():
        assert "end of life" not in found["text"].lower(), page
    text = layouts["benchmarks/index.html"]["text"]
    assert text.index("What this means") < text.index("All ratios")
