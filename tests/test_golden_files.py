"""The golden-file check: a difference fails with its diff; only --update-golden rewrites."""

from __future__ import annotations

from pathlib import Path

import pytest

from testing.golden import Golden

DIFF = """\
--- a/golden/report.md
+++ b/golden/report.md
@@ -1,2 +1,2 @@
 title
-old line
+new line
"""


def golden_in(tmp_path: Path, update: bool) -> tuple[Golden, list[str]]:
    shown: list[str] = []
    (tmp_path / "golden").mkdir()
    (tmp_path / "golden" / "report.md").write_text("title\nold line\n", encoding="utf-8")
    return Golden(tmp_path / "golden", update, shown.append), shown


def test_equal_text_passes_and_shows_nothing(tmp_path: Path) -> None:
    golden, shown = golden_in(tmp_path, update=True)

    golden.check("report.md", "title\nold line\n")

    assert shown == []


def test_a_difference_fails_with_the_diff_and_leaves_the_file(tmp_path: Path) -> None:
    golden, shown = golden_in(tmp_path, update=False)

    with pytest.raises(pytest.fail.Exception) as failed:
        golden.check("report.md", "title\nnew line\n")

    assert str(failed.value) == (
        "golden/report.md differs from the rendered text (if the change is meant, accept it "
        "with pytest --update-golden):\n" + DIFF
    )
    assert (tmp_path / "golden" / "report.md").read_text() == "title\nold line\n"
    assert shown == []


def test_update_shows_the_diff_then_rewrites(tmp_path: Path) -> None:
    golden, shown = golden_in(tmp_path, update=True)

    golden.check("report.md", "title\nnew line\n")

    assert shown == ["--update-golden: rewriting golden/report.md\n" + DIFF]
    assert (tmp_path / "golden" / "report.md").read_text() == "title\nnew line\n"


def test_a_missing_golden_file_fails_with_all_of_the_text(tmp_path: Path) -> None:
    golden, _ = golden_in(tmp_path, update=False)

    with pytest.raises(pytest.fail.Exception) as failed:
        golden.check("new.yaml", "a: 1\nb: 2")

    assert str(failed.value).endswith(
        "--- /dev/null\n+++ b/golden/new.yaml\n@@ -0,0 +1,2 @@\n+a: 1\n+b: 2\n"
        "\\ No newline at end of file\n"
    )
    assert not (tmp_path / "golden" / "new.yaml").exists()
