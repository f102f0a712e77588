"""The merge-request comment: one Markdown body per train config, rendered from a template.

Pure: :func:`render_report` turns a :class:`~ci_runner.results.report.ReportInput` into
Markdown. The body's first line is a hidden :func:`marker` (so the publisher finds its comment
again), its last line the verdicts of earlier runs as hidden JSON (read back with
:func:`extract_history`). :func:`render_comment` is the publisher's callback: it keeps the
history of the comment it is about to replace.

Untrusted text (names, branch, log lines, failure messages) only ever appears inside code
spans, fenced code blocks or sanitised chart labels, never at a line start outside a fence,
so it cannot change the structure, mention anyone, reference issues or run quick actions; and it
never holds ``<!--`` (:func:`~ci_runner.results.markdown.clean`), so it cannot open a comment.

The hidden lines are trusted only where ci-runner writes them: the first line and the last,
with all untrusted text between. A branch's training prints the log tail quoted in the body, so
a marker or history anywhere else may be forged. Their place, not a secret nonce, marks them:
a nonce would be in the note for anyone to read and copy into the next run's log, and ci-runner
has nowhere to keep a secret from one run to the next.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import replace
from datetime import timezone
from typing import Any, Final

from ci_runner.backends.result import Failure, Outcome, QueueWait
from ci_runner.clock import duration
from ci_runner.config.types import Goal
from ci_runner.context import CIContext
from ci_runner.results import chart
from ci_runner.results.artifacts import ArtifactListing
from ci_runner.results.markdown import clean, code, fence, link, plural
from ci_runner.results.metrics import MetricResult
from ci_runner.results.report import HistoryEntry, ReportInput, history_from_json
from ci_runner.templating import environment

TEMPLATE: Final = "comment.md.j2"
MAX_TABLE_ROWS: Final = 60
MAX_HISTORY: Final = 20
TAIL_LINES: Final = 100  # of the log's end, shown under the result
SHOWN_TAIL_LINE_CHARS: Final = 500  # a longer line of the tail is cut, with an ellipsis
TAIL_TOTAL_CHARS: Final = 30_000
HISTORY_TAG: Final = "ci-runner-history:"
REPLY_TAG: Final = "ci-runner-result:job-"

_HISTORY: Final = re.compile(r"<!-- " + re.escape(HISTORY_TAG) + r" (\[.*\]) -->")

_VERDICTS: Final = {
    Outcome.SUCCEEDED: ("✅", "training succeeded"),
    Outcome.FAILED: ("❌", "training failed"),
    Outcome.CANCELLED: ("🚫", "training cancelled"),
    Outcome.RUNNING: ("⏳", "training started"),
}


def marker(config_name: str) -> str:
    """The hidden first line that identifies this train config's comment, e.g.
    ``<!-- ci-runner:simple-ml -->`` (anything but ``[A-Za-z0-9._/]`` and single dashes is
    percent-encoded, so the name can never end the HTML comment)."""
    encoded = re.sub(
        r"[^A-Za-z0-9._/-]|-(?=-)|-$",
        lambda m: "".join(f"%{b:02X}" for b in m.group().encode()),
        config_name,
    )
    return f"<!-- ci-runner:{encoded} -->"


def reply_marker(job_id: str | None) -> str | None:
    """The hidden first line of the result note one CI job posts after the comment, e.g.
    ``<!-- ci-runner-result:job-4242 -->``: finding it in the thread means this job's reply is
    there already. None for a job id that is not a number (never one from GitLab). It is never
    a :func:`marker`, so the reply is never taken for the comment."""
    if not job_id or not job_id.isascii() or not job_id.isdigit():
        return None
    return f"<!-- {REPLY_TAG}{job_id} -->"


def render_reply(report: ReportInput, reply_tag: str, comment_url: str | None) -> str:
    """The short note that tells the participants how the run ended (GitLab notifies them of a
    new note, never of an edited one): the verdict, the first metric with its change against
    the baseline, and links to the job and the full report."""
    icon, verdict = _VERDICTS[report.outcome]
    ctx = report.context
    parts = [f"{icon} **{verdict[0].upper()}{verdict[1:]}**: {code(report.config_name)}"]
    headline = _headline(report)
    if headline:
        parts.append(headline)
    if report.failure is not None:
        parts.append(f"reason: {code(report.failure.message, limit=200)}")
    if ctx.job_id:
        parts.append(link(f"job #{ctx.job_id}", ctx.job_url))
    if comment_url:
        parts.append(link("full report", comment_url))
    return f"{reply_tag}\n{' · '.join(parts)}"


def _headline(report: ReportInput) -> str | None:
    """The first metric's final value and its change against the baseline."""
    metrics = report.metrics.metrics if report.metrics else ()
    first = next((m for m in metrics if m.found), metrics[0] if metrics else None)
    if first is None:
        return None
    name = code(first.name, limit=80)
    if not first.found or first.final is None:
        return f"{name} not in the log"
    text = f"{name} **{fmt(first.final)}**"
    base = report.baseline.get(first.name) if report.baseline is not None else None
    if base is not None and report.baseline_ref:
        text += f" ({_change(first, base)} against {code(report.baseline_ref)})"
    elif report.baseline_ref:
        text += f" (no baseline from {code(report.baseline_ref)})"
    return text


def extract_history(body: str | None) -> list[HistoryEntry]:
    """The runs recorded in a comment body we wrote earlier, newest first ([] for garbage):
    its last line only, where :func:`render_report` writes them."""
    if not body:
        return []
    match = _HISTORY.fullmatch(body.rstrip().rpartition("\n")[2])
    if match is None:
        return []
    try:
        data = json.loads(match.group(1))
    except (ValueError, RecursionError):
        return []
    return history_from_json(data)[: MAX_HISTORY + 1]


def render_comment(report: ReportInput, previous_body: str | None) -> str:
    """The new comment body, keeping the history found in ``previous_body`` (the publisher's
    ``render(previous_body)`` callback: ``functools.partial(render_comment, report)``)."""
    return render_report(replace(report, history=tuple(extract_history(previous_body))))


def render_report(report: ReportInput) -> str:
    """The comment's Markdown (also ``report.md``)."""
    current = report.history_entry()
    history = [e for e in report.history if current.job_id is None or e.job_id != current.job_id]
    history = history[:MAX_HISTORY]
    icon, verdict = _VERDICTS[report.outcome]
    if report.queued is not None:
        verdict = "training queued"
    ctx = report.context
    view = {
        "marker": marker(report.config_name),
        "verdict": f"### {icon} {verdict[0].upper()}{verdict[1:]}: {code(report.config_name)}",
        "details": _details_line(report),
        "running": report.outcome is Outcome.RUNNING,
        "queued": _queued_text(report.queued) if report.queued else None,
        "failure": _failure_text(report.failure) if report.failure else None,
        "metrics": _metrics_section(report) if report.outcome is not Outcome.RUNNING else None,
        "charts": [
            {"name": code(drawn.metric, limit=80), "source": drawn.source, "key": drawn.key}
            for drawn in (chart.charts(report.metrics) if report.metrics else [])
        ],
        "artifacts": _artifacts_section(report.artifacts) if report.artifacts else None,
        "tail": _log_tail(report.log_tail)
        if report.outcome in (Outcome.FAILED, Outcome.CANCELLED)
        else None,
        "history": [_history_line(e, ctx) for e in history],
        "history_tag": HISTORY_TAG,
        "history_json": _history_json([current, *history]),
    }
    return environment().get_template(TEMPLATE).render(**view)


# ----------------------------------------------------------------------------- formatting


def _queued_text(wait: QueueWait) -> str:
    """Where Kueue keeps the job waiting, and since when."""
    where = f"Kueue's LocalQueue {code(wait.local_queue)}"
    if wait.cluster_queue:
        where += f" (ClusterQueue {code(wait.cluster_queue)})"
    since = wait.since.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return f"Queued in {where} since {since}: training starts when Kueue admits it."


def fmt(value: float | None) -> str:
    """A metric value for people: 6 significant digits."""
    if value is None:
        return "–"
    return f"{value:.6g}"


def size(num_bytes: int) -> str:
    value = float(num_bytes)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{num_bytes} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def _project_link(ctx: CIContext, path: str) -> str | None:
    return f"{ctx.project_url.rstrip('/')}/-/{path}" if ctx.project_url else None


def _details_line(report: ReportInput) -> str:
    ctx = report.context
    parts = [link(f"`{ctx.short_sha}`", _project_link(ctx, f"commit/{ctx.sha}"))]
    if ctx.ref_name:
        parts[0] += f" on {code(ctx.ref_name)}"
    if ctx.pipeline_id:
        parts.append(
            link(f"pipeline #{ctx.pipeline_id}", _project_link(ctx, f"pipelines/{ctx.pipeline_id}"))
        )
    if ctx.job_id:
        parts.append(link(f"job #{ctx.job_id}", ctx.job_url))
    if report.outcome is not Outcome.RUNNING:
        seconds = report.duration_seconds
        parts.append("–" if seconds is None else duration(seconds, spaced=True))
    ranks = report.workers * report.slots_per_worker
    shape = (
        f"{plural(report.workers, 'worker')} × {plural(report.slots_per_worker, 'slot')}"
        f" ({plural(ranks, 'rank')})"
    )
    if report.gpus_per_worker:
        total = report.gpus_per_worker * report.workers
        shape += f", {plural(report.gpus_per_worker, 'GPU')} per worker ({total} in all)"
    else:
        shape += ", CPU only"
    parts.append(shape)
    parts.append(f"{report.job_kind} {code(report.mpijob_name)}")
    if report.tracking_url:
        parts.append(link("MLflow run", report.tracking_url))
    return " · ".join(parts)


def _failure_text(failure: Failure) -> str:
    facts = [failure.kind.value]
    if failure.exit_code is not None:
        facts.append(f"exit code {failure.exit_code}")
    if failure.pod:
        facts.append(f"pod {code(failure.pod)}")
    return f"**Reason:** {code(failure.message, limit=1000)} ({', '.join(facts)})"


# ----------------------------------------------------------------------------- metrics


def _better(goal: Goal, delta: float) -> str:
    if delta == 0:
        return "unchanged"
    improved = delta < 0 if goal == "min" else delta > 0
    return "🟢 better" if improved else "🔴 worse"


def _change(metric: MetricResult, base: float | None) -> str:
    if metric.final is None or base is None:
        return "–"
    delta = metric.final - base
    relative = f" ({delta / abs(base) * 100:+.1f}%)" if base else ""
    return f"{delta:+.4g}{relative} {_better(metric.goal, delta)}"


def _metrics_section(report: ReportInput) -> dict[str, Any] | None:
    summary = report.metrics
    if summary is None or not summary.metrics:
        return None
    has_baseline = report.baseline is not None
    header = ["Metric", "Goal", "Final", "Best"]
    if has_baseline:
        header += ["Baseline", "Change"]
    header.append("Points")
    rows = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join([" --- ", " --- "] + [" ---: "] * (len(header) - 2)) + "|",
    ]
    notes: list[str] = []
    for metric in summary.metrics[:MAX_TABLE_ROWS]:
        name = code(metric.name, in_table=True, limit=80)
        goal = "lower is better" if metric.goal == "min" else "higher is better"
        if metric.found:
            final = f"**{fmt(metric.final)}**"
            best = f"{fmt(metric.best)} (step {metric.best_step}, rank {metric.best_rank})"
        else:
            final, best = "not in the log", "–"
        cells = [name, goal, final, best]
        if report.baseline is not None:
            base = report.baseline.get(metric.name)
            cells += [fmt(base), _change(metric, base)]
        cells.append(str(metric.count))
        rows.append("| " + " | ".join(cells) + " |")
        if metric.unparseable:
            sample = code(metric.unparseable_sample or "", limit=40)
            notes.append(
                f"⚠️ {code(metric.name, limit=80)}: "
                f"{plural(metric.unparseable, 'value')} not a finite number (first: {sample})"
            )
    hidden = len(summary.metrics) - MAX_TABLE_ROWS
    if hidden > 0:
        notes.append(f"… and {plural(hidden, 'more metric')} (see `metrics.json`)")
    if summary.ignored_json:
        notes.append(
            f"⚠️ {plural(summary.ignored_json, 'malformed `CI_RUNNER_METRIC` line')} ignored"
        )
    if report.baseline is None:
        target = f" from {code(report.baseline_ref)}" if report.baseline_ref else ""
        notes.append(f"No baseline{target}: no `metrics.json` from a successful target run.")
    elif report.baseline_ref and report.baseline_pipeline:
        pipeline_id, url = report.baseline_pipeline
        source = link(f"pipeline #{pipeline_id}", url)
        notes.append(f"Baseline: {code(report.baseline_ref)} at {source}.")
    elif report.baseline_ref:
        notes.append(f"Baseline: the latest successful run on {code(report.baseline_ref)}.")
    return {"table": "\n".join(rows), "notes": notes}


# ----------------------------------------------------------------------------- artifacts


def _artifacts_section(listing: ArtifactListing) -> dict[str, Any]:
    items = []
    for item in listing.links:
        name = code(item.name, limit=200)
        if listing.local:
            items.append(f"{name}: {code(item.url, limit=500)} ({size(item.size)})")
        else:
            items.append(f"{link(name, item.url)} ({size(item.size)})")
    if listing.more:
        more = f"more than {listing.more}" if listing.more_is_lower_bound else str(listing.more)
        items.append(f"… and {more} more under {code(listing.location)}")
    expires = (
        f"Links expire {listing.expires_at.strftime('%Y-%m-%d %H:%M UTC')}."
        if listing.expires_at
        else None
    )
    return {
        "location": code(listing.location, limit=500),
        "links": items,
        "warning": code(listing.warning, limit=500) if listing.warning else None,
        "expires": expires,
    }


# ----------------------------------------------------------------------------- log tail


def _log_tail(lines: Sequence[str]) -> dict[str, Any] | None:
    if not lines:
        return None
    kept: list[str] = []
    total = 0
    for raw in reversed(lines[-TAIL_LINES:]):
        line = raw.rstrip("\r\n").replace("\t", "    ").replace("\n", " ")
        line = clean(line, SHOWN_TAIL_LINE_CHARS)
        total += len(line) + 1
        if total > TAIL_TOTAL_CHARS:
            break
        kept.append(line)
    kept.reverse()
    text = "\n".join(kept)
    return {"count": len(kept), "fence": fence(text, shortest=3), "text": text}


# ----------------------------------------------------------------------------- history


def _history_line(entry: HistoryEntry, ctx: CIContext) -> str:
    icon = _VERDICTS[Outcome(entry.outcome)][0]
    word = "started, no result" if entry.outcome == Outcome.RUNNING.value else entry.outcome
    parts = [f"{icon} {word}", f"`{clean(entry.sha, 12).replace('`', '')}`"]
    if entry.job_id and entry.job_id.isdigit():
        parts.append(link(f"job #{entry.job_id}", _project_link(ctx, f"jobs/{entry.job_id}")))
    if entry.metric is not None and entry.value is not None:
        parts.append(f"{code(entry.metric, limit=80)} {fmt(entry.value)}")
    if entry.duration_seconds is not None:
        parts.append(duration(entry.duration_seconds, spaced=True))
    return " · ".join(parts)


def _history_json(entries: Sequence[HistoryEntry]) -> str:
    """Compact one-line JSON that cannot end the HTML comment it sits in (no ``--``, no ``>``)
    nor hold anything GitLab could read as markup or a mention (ASCII only, no ``<&@``)."""
    text = json.dumps([e.to_json() for e in entries], ensure_ascii=True, separators=(",", ":"))
    for char in "<>&@":
        text = text.replace(char, f"\\u{ord(char):04x}")
    return text.replace("--", "-\\u002d")
