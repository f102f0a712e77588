from __future__ import annotations

from pathlib import Path

import pytest

from ci_runner.backends.logsink import LogSink, tail_lines
from ci_runner.masking import MASK, SecretMasker


def make_sink(
    tmp_path: Path, secrets: list[str] | None = None, **kw: int
) -> tuple[LogSink, list[str]]:
    echoed: list[str] = []
    sink = LogSink(
        tmp_path / "log" / "launcher.log", echoed.append, SecretMasker(secrets or []), **kw
    )
    return sink, echoed


def test_lines_split_anywhere_come_out_whole(tmp_path: Path) -> None:
    sink, echoed = make_sink(tmp_path)
    for chunk in ["[0]<stdout>:Train", "ing. Epoch 0\n[1]<std", "out>:x\n", "partial"]:
        sink.feed(chunk)
    assert echoed == ["[0]<stdout>:Training. Epoch 0\n", "[1]<stdout>:x\n"]
    sink.close()
    assert echoed[-1] == "partial\n"
    assert (tmp_path / "log" / "launcher.log").read_text() == (
        "[0]<stdout>:Training. Epoch 0\n[1]<stdout>:x\npartial\n"
    )
    assert sink.tail == ("[0]<stdout>:Training. Epoch 0", "[1]<stdout>:x", "partial")
    assert sink.lines == 3


def test_utf8_split_inside_a_character(tmp_path: Path) -> None:
    sink, echoed = make_sink(tmp_path)
    data = "Verlust: 0.5 – größer\n".encode()
    cut = data.index("–".encode()) + 1
    sink.feed(data[:cut])
    sink.feed(data[cut:])
    assert echoed == ["Verlust: 0.5 – größer\n"]


def test_invalid_utf8_is_replaced_not_fatal(tmp_path: Path) -> None:
    sink, echoed = make_sink(tmp_path)
    sink.feed(b"bad \xff byte\n")
    assert echoed == ["bad \ufffd byte\n"]


def test_secret_split_across_reads_is_masked(tmp_path: Path) -> None:
    secret = "glpat-CANARY-1234567890"
    sink, echoed = make_sink(tmp_path, [secret])
    sink.feed("token=glpat-CAN")
    sink.feed("ARY-1234567890 done\n")
    sink.close()
    assert echoed == [f"token={MASK} done\n"]
    assert secret not in (tmp_path / "log" / "launcher.log").read_text()


def test_secret_straddling_the_cut_of_an_overlong_line_is_masked(tmp_path: Path) -> None:
    secret = "s3cr3t-value-XYZ"
    sink, echoed = make_sink(tmp_path, [secret], max_line_chars=40)
    text = "a" * 30 + secret + "b" * 30 + "\n"
    for i in range(0, len(text), 7):
        sink.feed(text[i : i + 7])
    sink.close()
    joined = "".join(echoed)
    assert secret not in joined
    assert joined == "a" * 30 + MASK + "b" * 30 + "\n"
    assert len(sink.tail) == 1  # pieces of one long line stay one tail entry


def test_an_encoded_secret_straddling_the_cut_of_an_overlong_line_is_masked(
    tmp_path: Path,
) -> None:
    sink, echoed = make_sink(tmp_path, ["s3cr3t/v?XYZ"], max_line_chars=10)
    text = "a" * 12 + "s3cr3t%2Fv%3FXYZ" + "b" * 30 + "\n"  # longer than the value
    for char in text:
        sink.feed(char)
    sink.close()
    assert "".join(echoed) == "a" * 12 + MASK + "b" * 30 + "\n"


def test_huge_line_is_passed_on_in_pieces_with_bounded_buffer(tmp_path: Path) -> None:
    sink, echoed = make_sink(tmp_path, max_line_chars=1024)
    for _ in range(1000):
        sink.feed("x" * 1000)
        assert len(sink._pending) <= 1024
    sink.feed("\n")
    sink.close()
    assert "".join(echoed) == "x" * 1_000_000 + "\n"
    assert sink.lines == 1
    assert len(sink.tail[0]) == 2000


def test_short_and_empty_secrets_are_not_masked() -> None:
    masker = SecretMasker(["", None, "ab", "abcd"])
    assert masker.mask("ab abcd") == f"ab {MASK}"
    assert masker.longest == 5  # "YWJjZ", the base64 of "abcd"


def test_longest_secret_wins_when_one_contains_another() -> None:
    masker = SecretMasker(["token", "token-extended"])
    assert masker.mask("token-extended token") == f"{MASK} {MASK}"
    assert masker.with_secrets(["more-secret"]).mask("more-secret") == MASK


def test_tail_keeps_only_the_last_lines(tmp_path: Path) -> None:
    sink, _ = make_sink(tmp_path, tail_size=3)
    for i in range(10):
        sink.feed(f"line {i}\n")
    assert sink.tail == ("line 7", "line 8", "line 9")


def test_context_manager_closes_once(tmp_path: Path) -> None:
    with make_sink(tmp_path)[0] as sink:
        sink.feed("end without newline")
    sink.close()
    assert sink.closed
    assert sink.path.read_text() == "end without newline\n"


def test_tail_lines_reads_only_the_end(tmp_path: Path) -> None:
    log = tmp_path / "big.log"
    log.write_text("".join(f"line {i}\n" for i in range(100_000)))
    assert tail_lines(log, 3) == ("line 99997", "line 99998", "line 99999")
    assert tail_lines(log, 5, max_bytes=30) == ("line 99998", "line 99999")
    assert tail_lines(tmp_path / "missing.log", 3) == ()


def test_saved_lines_read_back_the_end_of_the_saved_log_beyond_the_tail(tmp_path: Path) -> None:
    sink, _ = make_sink(tmp_path, tail_size=3)
    for i in range(1000):
        sink.feed(f"line {i}\n")
    sink.feed("cut")  # not a whole line yet: not on disk
    assert sink.saved_lines(30) == ("line 997", "line 998", "line 999")
    assert len(sink.saved_lines(100_000)) == 1000
    sink.close()
    assert sink.saved_lines(14) == ("line 999", "cut")  # whole lines only


def test_a_line_is_on_disk_before_the_ci_log_shows_it(tmp_path: Path) -> None:
    on_disk_when_shown: list[str] = []
    path = tmp_path / "train.log"
    sink = LogSink(path, lambda text: on_disk_when_shown.append(path.read_text()))
    sink.feed("[0]<stdout>:epoch 1\n[1]<stdout>:epo")
    assert on_disk_when_shown == ["[0]<stdout>:epoch 1\n"]  # no close(): as a killed process


def test_an_interrupted_echo_never_shows_a_line_twice(tmp_path: Path) -> None:
    shown: list[str] = []

    def echo(text: str) -> None:
        shown.append(text)
        if len(shown) == 1:
            raise KeyboardInterrupt

    # One piece that completes a line and starts an overlong one: two echoes are due.
    sink = LogSink(tmp_path / "train.log", echo, max_line_chars=8)
    with pytest.raises(KeyboardInterrupt):
        sink.feed("one\n" + "x" * 12)
    sink.close()
    assert shown == ["one\n"]  # the x's are in the saved log, never repeated in the CI log
    assert sink.path.read_text() == "one\n" + "x" * 12


def test_a_piece_of_many_lines_is_one_echo_and_the_tail_keeps_the_last(tmp_path: Path) -> None:
    sink, echoed = make_sink(tmp_path, ["s3cr3t-value"], tail_size=3)
    text = "".join(f"[{i % 8}]<stdout>:step {i} s3cr3t-value\r\n" for i in range(100))
    sink.feed(text.encode())
    masked = text.replace("s3cr3t-value", MASK)
    assert echoed == [masked]
    assert sink.tail == tuple(f"[{i % 8}]<stdout>:step {i} {MASK}" for i in (97, 98, 99))
    assert sink.lines == 100
    sink.close()
    assert (tmp_path / "log" / "launcher.log").read_bytes() == masked.encode()


def test_the_tail_joins_the_pieces_of_an_overlong_line_to_the_lines_after(tmp_path: Path) -> None:
    sink, echoed = make_sink(tmp_path, tail_size=3, max_line_chars=10)
    sink.feed("a\n" + "x" * 15)  # "a" and a piece of the long line
    sink.feed("y" * 5 + "\nb\nc\n")  # the long line ends, two more follow
    sink.close()
    assert echoed == ["a\n", "x" * 15, "y" * 5 + "\nb\nc\n"]
    assert sink.tail == ("x" * 15 + "y" * 5, "b", "c")
    assert sink.lines == 4
