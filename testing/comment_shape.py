"""The shape of a Markdown comment, to check that untrusted text inside it changes nothing of
its structure."""

from __future__ import annotations

import re


def outside_code(body: str) -> str:
    """``body`` without fenced blocks, code spans and the hidden history/marker comments."""
    kept: list[str] = []
    fence: str | None = None
    for line in body.splitlines():
        if fence is None:
            opening = re.match(r"(`{3,})", line)
            if opening:
                fence = opening.group(1)
                continue
            kept.append(line)
        elif line.strip() == fence:
            fence = None
    text = "\n".join(kept)
    text = re.sub(r"(`+)(.+?)\1(?!`)", "", text)
    return re.sub(r"<!-- ci-runner[^\n]*-->", "", text)


def cell_borders(row: str) -> int:
    """Pipes that split a GFM table row: the row is read as ``\\X`` pairs and other chars."""
    borders, i = 0, 0
    while i < len(row):
        if row[i] == "\\":
            i += 2
            continue
        borders += row[i] == "|"
        i += 1
    return borders


def skeleton(body: str) -> list[tuple[str, int]]:
    """The comment's structure: each line outside fences by first character (table rows with
    their cell count), each fenced block by its info string and line count."""
    shape: list[tuple[str, int]] = []
    lines = body.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        opening = re.match(r"(`{3,})(.*)$", line)
        if opening is None:
            shape.append((line[:1], cell_borders(line) if line.startswith("|") else 0))
            i += 1
            continue
        fence, end = opening.group(1), i + 1
        while end < len(lines) and not re.fullmatch(rf"{fence}`* *", lines[end]):
            end += 1
        shape.append((f"fence {opening.group(2)}", end - i - 1))
        i = end + 1
    return shape
