"""``annotations.json``, GitLab's ``artifacts:reports:annotations`` (GitLab 16.3+): external links
on the job's page. The MLflow run's link (``ci_runner.tracking``) and the model outputs' share
the one file, each label once.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from ci_runner.results.artifacts import ArtifactListing

ANNOTATIONS_NAME: Final = "annotations.json"
SECTION: Final = "ci-runner"  # the section GitLab shows the links under
MAX_OUTPUT_LINKS: Final = 10  # of the model's files, on the job page (the comment lists more)


def add_links(out_dir: Path, links: Sequence[tuple[str, str]]) -> None:
    """Add ``(label, url)`` external links to ``out_dir``'s annotations.json, keeping the links
    already there (a link of the same label is replaced)."""
    path = out_dir / ANNOTATIONS_NAME
    kept: list[Any] = []
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        kept = [e for e in data.get(SECTION, []) if isinstance(e, dict)]
    except (OSError, ValueError, AttributeError):
        pass
    labels = {label for label, _ in links}
    kept = [e for e in kept if (e.get("external_link") or {}).get("label") not in labels]
    kept += [{"external_link": {"label": label, "url": url}} for label, url in links]
    out_dir.mkdir(parents=True, exist_ok=True)
    text = json.dumps({SECTION: kept}, indent=2) + "\n"
    path.write_text(text, encoding="utf-8")


def output_links(listing: ArtifactListing | None) -> list[tuple[str, str]]:
    """The model's files as job-page links: S3 download links only (a path on the runner is no
    link for a browser)."""
    if listing is None or listing.local:
        return []
    return [(f"Model output: {link.name}", link.url) for link in listing.links[:MAX_OUTPUT_LINKS]]
