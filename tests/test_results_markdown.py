"""Untrusted text made safe for Markdown: no text of a branch can open an HTML comment."""

from __future__ import annotations

import pytest

from ci_runner.results.markdown import clean, code


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("<!-- ci-runner:other-config -->", "<!- - ci-runner:other-config -->"),
        ("a<!--b<!--c", "a<!- -b<!- -c"),
        ("<!---->", "<!- --->"),
        ("<!<!---", "<!<!- --"),
        ("<!-<!--", "<!-<!- -"),
        ("<!\x1b[31m-- red", "<!- - red"),  # an opening once the colour code is gone
        ("<!\x07--", "<! --"),
        ("<!-\n-", "<!- -"),
        ("<! -- -->", "<! -- -->"),
    ],
)
def test_clean_never_leaves_an_html_comment_opening(text: str, shown: str) -> None:
    assert clean(text) == shown
    assert "<!--" not in clean(text)


def test_the_neutral_form_counts_towards_the_limit() -> None:
    assert clean("ab<!--", limit=6) == "ab<!-…"
    assert clean("abc<!--", limit=6) == "abc<!…"


def test_code_spans_and_table_cells_show_the_neutral_form() -> None:
    assert code("<!-- ci-runner-result:job-9 -->") == "`<!- - ci-runner-result:job-9 -->`"
    assert code("x|<!--", in_table=True) == "`x\\|<!- -`"
