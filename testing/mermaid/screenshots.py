"""Screenshots of the comments as a reviewer sees them on GitLab, for a person to look at.

``make screenshots`` (``python -m testing.mermaid.screenshots OUT_DIR``) writes one PNG per golden
comment and theme (``<name>-light.png``, ``<name>-dark.png``), and the same for a larger sample
comment (4 ranks, one stopping early, 3 metrics). The Markdown is rendered as CommonMark with
tables; each Mermaid diagram is drawn with the Mermaid GitLab ships, set up as GitLab sets it up,
where GitLab's auto-draw rule draws it (testing/fake_gitlab/mermaid.py), else GitLab's warning
with its Display button is shown. ``<details>`` are shown open, their charts drawn as on opening.
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
from pathlib import Path

from ci_runner.backends.result import Outcome
from ci_runner.config.types import MetricSpec
from ci_runner.context import CIContext
from ci_runner.results.metrics import parse_metrics
from ci_runner.results.report import ReportInput
from ci_runner.results.report_markdown import render_report
from testing.fake_gitlab.mermaid import diagrams, markdown
from testing.mermaid.browser import GITLAB_MERMAID, mermaid_js, missing_tools, run_chromium
from testing.paths import GOLDEN_DIR

GOLDEN = GOLDEN_DIR
WIDTH = 1000  # about the width of a note on an MR page
# GitLab's light and dark page colours for note text; Mermaid draws its own chart background.
PAGES = {
    "light": {"theme": "neutral", "background": "#ffffff", "text": "#333238", "code": "#ececef"},
    "dark": {"theme": "dark", "background": "#18171d", "text": "#ececef", "code": "#333238"},
}
# render_sandboxed_mermaid.js:164-177: the alert shown instead of a diagram it does not draw.
WARNING = "Warning: Displaying this diagram might cause performance issues on this page."

_STYLE = """
body { margin: 0; padding: 24px; width: %(width)dpx; box-sizing: border-box;
  background: %(background)s; color: %(text)s; font: 14px/1.5 "GitLab Sans", system-ui,
  -apple-system, "Segoe UI", Roboto, "Noto Sans", Ubuntu, Cantarell, "Helvetica Neue",
  sans-serif; }
code { background: %(code)s; padding: 2px 4px; border-radius: 4px; font-size: 90%%; }
pre { background: %(code)s; padding: 8px; overflow: hidden; white-space: pre-wrap; }
pre code { background: none; padding: 0; }
table { border-collapse: collapse; } td, th { border: 1px solid #bfbfc3; padding: 4px 8px; }
a { color: #1f75cb; } .chart { max-width: 700px; }
.warning { border-left: 4px solid #c17d10; background: rgba(193, 125, 16, .12); padding: 8px;
  max-width: 700px; } .warning button { margin-left: 12px; }
"""

_SCRIPT = """
(async () => {
  mermaid.initialize({ mermaid: { startOnLoad: false }, theme: %(theme)s,
    flowchart: { useMaxWidth: true, htmlLabels: true },
    secure: ['secure', 'securityLevel', 'startOnLoad', 'maxTextSize', 'htmlLabels'],
    securityLevel: 'strict' });
  const charts = [...document.querySelectorAll('div.chart')];
  for (const [i, el] of charts.entries()) {
    const { svg } = await mermaid.mermaidAPI.render('mermaid' + i, el.dataset.source);
    el.innerHTML = svg;
    el.firstElementChild.removeAttribute('height');
  }
  document.getElementById('height').textContent = document.body.scrollHeight;
})();
"""


def page_html(body: str, page: str) -> str:
    """The comment as an HTML page: Markdown rendered, diagrams to draw or GitLab's warning."""
    colours = PAGES[page]
    drawn = iter(d.drawn for d in diagrams(body))
    html = markdown().render(body).replace("<details>", "<details open>")

    def diagram(match: re.Match[str]) -> str:
        source = _unescape(match.group(1))
        if not next(drawn):
            return f"<div class='warning'>{WARNING}<button>Display</button></div>"
        return f"<div class='chart' data-source='{_attribute(source)}'></div>"

    html = re.sub(
        r'<pre><code class="language-mermaid">(.*?)</code></pre>', diagram, html, flags=re.DOTALL
    )
    script = _SCRIPT % {"theme": json.dumps(colours["theme"])}
    style = _STYLE % {"width": WIDTH, **colours}
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<style>{style}</style>"
        f"<script src='{mermaid_js(GITLAB_MERMAID).as_uri()}'></script></head><body>"
        f"{html}<pre id='height' hidden></pre><script>{script}</script></body></html>"
    )


def _unescape(text: str) -> str:
    return (
        text.replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", '"').replace("&amp;", "&")
    )


def _attribute(text: str) -> str:
    return text.replace("&", "&amp;").replace("'", "&#39;").replace("<", "&lt;")


def sample_comment() -> str:
    """A comment with 3 metrics on 4 ranks, rank 3 stopping at step 120 of 300."""
    names = ("train_loss", "val_loss", "accuracy")
    specs = [
        MetricSpec(
            n, re.compile(rf"{n} (?P<step>\d+) (?P<value>\S+)"), "max" if n == "accuracy" else "min"
        )
        for n in names
    ]
    lines = []
    for step in range(300):
        for rank in range(4):
            if rank == 3 and step > 120:
                continue
            loss = 2.0 / (1 + step / 20) + 0.05 * rank + (step * 7919 + rank) % 11 / 200
            warm = 8.0 if step < 3 else 0.0
            lines.append(f"[{rank}]<stdout>:train_loss {step} {loss + warm}")
            if step % 10 == 0:
                lines.append(f"[{rank}]<stdout>:val_loss {step} {loss * 1.1 + 0.02}")
            lines.append(f"[{rank}]<stdout>:accuracy {step} {0.98 - 0.5 / (1 + step / 10)}")
    context = CIContext(sha="0123456789abcdef0123456789abcdef01234567", project_path="g/p")
    report = ReportInput(
        Outcome.SUCCEEDED,
        "sample",
        context,
        "sample-01234567",
        workers=4,
        metrics=parse_metrics(lines, specs),
    )
    return render_report(report)


def screenshot(body: str, out: Path, page: str, work: Path) -> None:
    """``out``: a PNG of the whole comment in the ``page`` colours."""
    html = work / f"{out.stem}.html"
    html.write_text(page_html(body, page), encoding="utf-8")
    profile = work / "profile"
    dom = run_chromium(html, profile, "--virtual-time-budget=60000", "--dump-dom")
    height = re.search(r"<pre id=\"height\" hidden=\"\">(\d+)</pre>", dom)
    if height is None:
        raise RuntimeError(f"{out.name}: the page did not finish drawing")
    run_chromium(
        html,
        profile,
        "--virtual-time-budget=60000",
        f"--window-size={WIDTH},{int(height.group(1)) + 8}",
        f"--screenshot={out}",
    )


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m testing.mermaid.screenshots OUT_DIR", file=sys.stderr)
        return 2
    problem = missing_tools()
    if problem:
        print(problem, file=sys.stderr)
        return 1
    out_dir = Path(argv[0])
    out_dir.mkdir(parents=True, exist_ok=True)
    comments = {p.stem: p.read_text(encoding="utf-8") for p in sorted(GOLDEN.glob("*.md"))}
    comments["sample-4-ranks-3-metrics"] = sample_comment()
    with tempfile.TemporaryDirectory() as work:
        for name, body in comments.items():
            for page in PAGES:
                target = out_dir / f"{name}-{page}.png"
                screenshot(body, target, page, Path(work))
                print(target)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
