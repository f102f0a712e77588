"""ci_runner.errors: the first line of a library's message, as error texts quote it."""

from __future__ import annotations

from ci_runner.errors import first_line


def test_first_line_is_stripped_and_cut_with_its_ellipsis() -> None:
    assert first_line("  403 Forbidden \n<html>...") == "403 Forbidden"
    assert first_line(None) == first_line("  \n") == ""
    assert first_line("x" * 201) == "x" * 199 + "…"
    assert first_line("x" * 201, ellipsis="...") == "x" * 197 + "..."
    assert first_line("x" * 200) == "x" * 200
