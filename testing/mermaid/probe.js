// Draws each chart of window.PROBE.charts with the page's Mermaid, set up as GitLab's sandbox
// page sets it up (testing/mermaid/browser.py), and writes what was drawn as JSON into #result.
/* global mermaid */
(async () => {
  const { charts, theme } = window.PROBE;
  // gitlabhq app/assets/javascripts/lib/mermaid.js:47-72 (initMermaid): theme 'neutral', or
  // 'dark' in dark mode; strict security; these keys locked against a diagram's directives.
  mermaid.initialize({
    mermaid: { startOnLoad: false },
    theme,
    flowchart: { useMaxWidth: true, htmlLabels: true },
    secure: ['secure', 'securityLevel', 'startOnLoad', 'maxTextSize', 'htmlLabels'],
    securityLevel: 'strict',
    dompurifyConfig: { ADD_TAGS: ['foreignObject'], HTML_INTEGRATION_POINTS: { foreignobject: true } },
  });
  const box = (el) => {
    const r = el.getBoundingClientRect();
    return [r.left, r.top, r.right, r.bottom];
  };
  const results = [];
  for (const [index, source] of charts.entries()) {
    const out = { error: null };
    try {
      await mermaid.parse(source);
      // lib/mermaid.js:41 (drawDiagram): mermaid.mermaidAPI.render('mermaid', source).
      const { svg } = await mermaid.mermaidAPI.render(`chart${index}`, source);
      const holder = document.createElement('div');
      holder.style.width = '700px';
      holder.innerHTML = svg;
      document.body.appendChild(holder);
      const root = holder.querySelector('svg');
      const texts = (selector) => [...root.querySelectorAll(selector)];
      out.background = root.querySelector('rect.background')?.getAttribute('fill') ?? null;
      out.lines = texts('g.plot > g').map((g) => {
        const path = g.querySelector('path');
        return { stroke: path.getAttribute('stroke'), d: path.getAttribute('d') };
      });
      out.xTicks = texts('g.bottom-axis g.label text').map((t) => t.textContent);
      out.xTickBoxes = texts('g.bottom-axis g.label text').map(box);
      out.xTitle = texts('g.bottom-axis g.title text').map((t) => t.textContent);
      out.yTicks = texts('g.left-axis g.label text').map((t) => t.textContent);
      out.yTitle = texts('g.left-axis g.title text').map((t) => t.textContent);
      out.yTitleBoxes = texts('g.left-axis g.title text').map(box);
      out.legend = texts('g.legend g.label text').map((t) => t.textContent);
      out.yAxisLine = root.querySelector('g.left-axis g.axisl-line path')?.getAttribute('d') ?? null;
      out.svgBox = box(root);
      holder.remove();
    } catch (error) {
      out.error = String(error && error.message ? error.message : error);
    }
    results.push(out);
  }
  const result = document.getElementById('result');
  result.textContent = JSON.stringify({ done: true, version: mermaid.version ?? null, results });
})();
