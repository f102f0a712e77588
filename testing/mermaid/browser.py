"""Real Mermaid in headless Chromium, for the chart tests and the comment screenshots.

The tools: Debian's ``chromium`` and Mermaid's browser bundle (``dist/mermaid.min.js`` of the
npm package) for each of :data:`MERMAID_VERSIONS`, kept in the same cache as the Horovod wheel
(``$CI_RUNNER_CACHE``, else ``~/.cache/ci-runner``). ``make mermaid`` (scripts/setup-mermaid.sh)
installs them; at test time nothing is fetched: the page loads the bundle from disk.

:func:`probe` draws chart sources in one page per Mermaid version and theme, initialised as
GitLab's sandbox page does (testing/mermaid/probe.js), and returns what each drawing holds.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from html import escape, unescape
from pathlib import Path

from testing.paths import cache_dir

GITLAB_MERMAID = "10.7.0"  # what GitLab ships (gitlabhq package.json, its mermaid dependency)
MERMAID_VERSIONS = (GITLAB_MERMAID, "11.17.2")  # and the newest 11.x
THEMES = ("neutral", "dark")  # GitLab's light and dark mode (lib/mermaid.js:47-52)
PROBE_JS = Path(__file__).resolve().with_name("probe.js")
# As the machine's notes say Chromium must run here: as root, with no network but loopback.
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)
BROWSER_SECONDS = 300


def mermaid_js(version: str) -> Path:
    return cache_dir() / "mermaid" / version / "mermaid.min.js"


def missing_tools() -> str | None:
    """What is not installed, as one line saying how to install it; None when all is there."""
    missing = [] if shutil.which("chromium") else ["chromium"]
    missing += [f"mermaid {v}" for v in MERMAID_VERSIONS if not mermaid_js(v).is_file()]
    if not missing:
        return None
    return f"{', '.join(missing)} not installed: run `make mermaid` (scripts/setup-mermaid.sh)"


def run_chromium(page: Path, profile: Path, *args: str) -> str:
    """Chromium on ``page`` (a file) with ``args``; its standard output."""
    profile.mkdir(parents=True, exist_ok=True)
    command = [
        "chromium",
        *CHROMIUM_FLAGS,
        f"--user-data-dir={profile}",
        *args,
        page.as_uri(),
    ]
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=BROWSER_SECONDS, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"chromium exited {done.returncode}: {done.stderr[-2000:]}")
    return done.stdout


@dataclass(frozen=True)
class Drawing:
    """What Mermaid drew for one chart source (``error``: why it did not)."""

    error: str | None
    background: str | None = None
    strokes: tuple[str, ...] = ()
    points: tuple[tuple[tuple[float, float], ...], ...] = ()  # per line, in SVG pixels
    x_ticks: tuple[str, ...] = ()
    x_tick_boxes: tuple[tuple[float, float, float, float], ...] = ()
    x_title: tuple[str, ...] = ()
    y_ticks: tuple[str, ...] = ()
    y_title: tuple[str, ...] = ()
    y_title_boxes: tuple[tuple[float, float, float, float], ...] = ()
    legend: tuple[str, ...] = ()
    y_axis: tuple[float, float] | None = None  # the y axis line's top and bottom
    svg_box: tuple[float, float, float, float] | None = None


_POINT = re.compile(r"[ML]\s*([^,LMZ\s]+)\s*,\s*([^,LMZ\s]+)")


def _points(d: str) -> tuple[tuple[float, float], ...]:
    return tuple((float(x), float(y)) for x, y in _POINT.findall(d))


def _drawing(raw: dict[str, object]) -> Drawing:
    if raw.get("error"):
        return Drawing(error=str(raw["error"]))
    lines = raw["lines"]
    assert isinstance(lines, list)
    axis = str(raw.get("yAxisLine") or "")
    ys = [y for _, y in _points(axis)]

    def strings(key: str) -> tuple[str, ...]:
        value = raw.get(key) or []
        assert isinstance(value, list)
        return tuple(str(v) for v in value)

    def boxes(key: str) -> tuple[tuple[float, float, float, float], ...]:
        value = raw.get(key) or []
        assert isinstance(value, list)
        return tuple((float(b[0]), float(b[1]), float(b[2]), float(b[3])) for b in value)

    svg = raw.get("svgBox")
    return Drawing(
        error=None,
        background=str(raw.get("background")),
        strokes=tuple(str(line["stroke"]) for line in lines),
        points=tuple(_points(str(line["d"])) for line in lines),
        x_ticks=strings("xTicks"),
        x_tick_boxes=boxes("xTickBoxes"),
        x_title=strings("xTitle"),
        y_ticks=strings("yTicks"),
        y_title=strings("yTitle"),
        y_title_boxes=boxes("yTitleBoxes"),
        legend=strings("legend"),
        y_axis=(min(ys), max(ys)) if ys else None,
        svg_box=(float(svg[0]), float(svg[1]), float(svg[2]), float(svg[3]))
        if isinstance(svg, list)
        else None,
    )


def probe(sources: list[str], version: str, theme: str, workdir: Path) -> list[Drawing]:
    """Draw ``sources`` with Mermaid ``version`` in ``theme``, one Chromium run for all."""
    workdir.mkdir(parents=True, exist_ok=True)
    data = json.dumps({"charts": sources, "theme": theme}).replace("<", "\\u003c")
    page = workdir / f"probe-{version}-{theme}.html"
    page.write_text(
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<script src='{escape(mermaid_js(version).as_uri())}'></script></head><body>"
        "<pre id='result'></pre>"
        f"<script>window.PROBE = {data};</script>"
        f"<script>{PROBE_JS.read_text(encoding='utf-8')}</script>"
        "</body></html>",
        encoding="utf-8",
    )
    dom = run_chromium(
        page, workdir / f"profile-{version}-{theme}", "--virtual-time-budget=120000", "--dump-dom"
    )
    match = re.search(r"<pre id=\"result\">(.*?)</pre>", dom, flags=re.DOTALL)
    if match is None or not match.group(1):
        raise RuntimeError(f"the probe page did not finish: {dom[-500:]}")
    result = json.loads(unescape(match.group(1)))
    return [_drawing(raw) for raw in result["results"]]


def main() -> int:
    """``python -m testing.mermaid.browser``: the Mermaid versions, one a line (for the setup
    script), or with ``--check`` whether everything is installed."""
    if sys.argv[1:] == ["--check"]:
        problem = missing_tools()
        print(problem or "chromium and Mermaid " + ", ".join(MERMAID_VERSIONS) + " installed")
        return 1 if problem else 0
    print("\n".join(MERMAID_VERSIONS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
