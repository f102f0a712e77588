"""ci_runner.backends.torchrun_failure: the first failing rank in one line, over what real torchrun
(torch 2.13.0, two ranks, gloo) wrote: tests/data/torchrun/*.log, made by its capture.sh, whose
scripts ran as /tmp/ci-runner-torchrun-fixture/train.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from ci_runner.backends.torchrun_failure import RankFailure, failure_line, first_failure

FIXTURES = Path(__file__).resolve().parent / "data" / "torchrun"
CODE_DIR = "/tmp/ci-runner-torchrun-fixture"


def fixture(name: str) -> list[str]:
    return (FIXTURES / f"{name}.log").read_text(encoding="utf-8").splitlines(keepends=True)


@pytest.mark.parametrize(
    ("name", "line"),
    [
        # no @record: the report has no traceback; rank 1's own, in the log, says it. Rank 0's
        # all_reduce failed too (its peer was gone), and torchrun then sent it SIGTERM.
        ("raise", "rank 1 raised ValueError: boom at 0.5 (train.py:10)"),
        # @record: the report's traceback, from rank 1's error file
        ("raise_record", "rank 1 raised ValueError: boom at 0.5 (train.py:11)"),
        # before init_process_group: a traceback without torch's [rank1]: prefix
        ("raise_early", "rank 1 raised KeyError: 'batch_size' (train.py:8)"),
        ("exit3", "rank 1 exited with code 3; its last line: giving up"),
        ("killed", "rank 1 was killed by signal 9 (SIGKILL)"),
        ("ok", None),
    ],
)
def test_each_real_run_in_one_line(name: str, line: str | None) -> None:
    assert failure_line(fixture(name), CODE_DIR) == line
    assert failure_line(fixture(name)) == line  # without the checkout: the file's name


def test_what_is_known_of_the_failing_rank() -> None:
    assert first_failure(fixture("killed")) == RankFailure(
        rank=1, exitcode=-9, signal_name="SIGKILL", last_line="started", host="localhost"
    )
    assert first_failure(fixture("raise_record"), CODE_DIR) == RankFailure(
        rank=1,
        exitcode=1,
        exception="ValueError: boom at 0.5",
        where="train.py:11",
        last_line="ValueError: boom at 0.5",
        host="localhost",
    )


def _without_ranks(lines: list[str]) -> list[str]:
    return [line for line in lines if "]<std>:" not in line]


def _report(lines: list[str]) -> list[str]:
    """torchrun's report: from its ChildFailedError's line to the end."""
    start = next(i for i, line in enumerate(lines) if "ChildFailedError" in line)
    return lines[start:]


def test_the_error_files_traceback_alone_says_it() -> None:
    """A tail of the log that holds the report but not the rank's lines: @record's error file."""
    assert failure_line(_without_ranks(fixture("raise_record")), CODE_DIR) == (
        "rank 1 raised ValueError: boom at 0.5 (train.py:11)"
    )


def test_without_a_traceback_the_exit_code() -> None:
    assert failure_line(_without_ranks(fixture("raise"))) == "rank 1 exited with code 1"


def test_without_the_report_the_first_rank_that_raised() -> None:
    """A log cut before torchrun's report: rank 1 raised first; rank 0's error came of it."""
    lines = fixture("raise")
    before = lines[: next(i for i, line in enumerate(lines) if "ChildFailedError" in line)]
    assert failure_line(before, CODE_DIR) == "rank 1 raised ValueError: boom at 0.5 (train.py:10)"
    rank0_first = [line for line in before if line.startswith("[0]")] + [
        line for line in before if line.startswith("[1]")
    ]
    assert failure_line(rank0_first, CODE_DIR) == (
        "rank 1 raised ValueError: boom at 0.5 (train.py:10)"
    )
    rank0_only = [line for line in before if not line.startswith("[1]")]
    assert failure_line(rank0_only, CODE_DIR) == (
        "rank 0 raised RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/"
        "pair.cc:553] Connection closed by peer [127.0.0.1]:56462. This is typically caused by "
        "a remote worker crashing. Check the logs of the remote worker before reporting an "
        "error. GLHF! 🏖️ (train.py:19)"
    )
    assert failure_line(lines[:4]) is None


def _as_rank(report: list[str], rank: int, exitcode: str) -> list[str]:
    """``report`` with its root cause's rank and exit code changed: another node's report."""
    root = report.index("Root Cause (first observed failure):\n")
    changed = report[:root]
    for line in report[root:]:
        if line.startswith("  rank      : "):
            line = f"  rank      : {rank} (local_rank: 0)\n"
        elif line.startswith("  exitcode  : "):
            line = f"  exitcode  : {exitcode} (pid: 1)\n"
        changed.append(line)
    return changed


def test_every_nodes_log_a_rank_that_failed_by_itself_first() -> None:
    """Two nodes' logs together: node 0's torchrun saw its rank 0 fail in all_reduce (its peer,
    rank 1 on node 1, was gone) and reports it first; node 1's report names rank 1."""
    lines = fixture("raise")
    ranks = [line for line in lines if "]<std>:" in line]
    report = _report(lines)
    node0 = _as_rank(report, 0, "1")
    assert failure_line([*ranks, *node0, *report], CODE_DIR) == (
        "rank 1 raised ValueError: boom at 0.5 (train.py:10)"
    )
    # A rank torchrun stopped (SIGTERM) comes after one that failed by itself, whatever the order.
    stopped = _as_rank(report, 0, "-15")
    exited = _as_rank(_report(fixture("exit3")), 3, "3")
    assert failure_line([*stopped, *exited]) == "rank 3 exited with code 3"
    assert failure_line(stopped) == "rank 0 was killed by signal 15 (SIGTERM)"


FRAMES = [
    "[2]<std>:[rank2]: Traceback (most recent call last):\n",
    '[2]<std>:[rank2]:   File "/ci-runner/code/train/main.py", line 40, in <module>\n',
    "[2]<std>:[rank2]:     fit(model)\n",
    '[2]<std>:[rank2]:   File "/ci-runner/code/train/loop.py", line 12, in fit\n',
    "[2]<std>:[rank2]:     loss = model(batch)\n",
    "[2]<std>:[rank2]:            ^^^^^^^^^^^^\n",
    '[2]<std>:[rank2]:   File "/venv/lib/python3.11/site-packages/torch/nn/modules/module.py", '
    "line 1775, in _wrapped_call_impl\n",
    "[2]<std>:[rank2]:     return self._call_impl(*args, **kwargs)\n",
    '[2]<std>:[rank2]:   File "/usr/lib/python3.11/functools.py", line 9, in wrapper\n',
    "[2]<std>:[rank2]: torch.OutOfMemoryError: CUDA out of memory.\n",
    "[2]<std>:[rank2]: Tried to allocate 2.00 GiB\n",
]


def test_where_is_the_users_code_innermost() -> None:
    assert failure_line(FRAMES, "/ci-runner/code") == (
        "rank 2 raised torch.OutOfMemoryError: CUDA out of memory. (train/loop.py:12)"
    )
    assert failure_line(FRAMES, "/ci-runner/code/") == failure_line(FRAMES, "/ci-runner/code")
    assert failure_line(FRAMES) == (
        "rank 2 raised torch.OutOfMemoryError: CUDA out of memory. (loop.py:12)"
    )
    # Only a library's frames: the innermost, from its package on.
    library = [FRAMES[0], *FRAMES[6:8], FRAMES[-2]]
    assert failure_line(library, "/ci-runner/code") == (
        "rank 2 raised torch.OutOfMemoryError: CUDA out of memory. "
        "(torch/nn/modules/module.py:1775)"
    )


def test_the_last_of_chained_exceptions_and_one_line_of_a_long_message() -> None:
    chained = [
        "[0]<std>:Traceback (most recent call last):\r\n",
        '[0]<std>:  File "/code/a.py", line 3, in <module>\r\n',
        "[0]<std>:KeyError: 'x'\r\n",
        "[0]<std>:\r\n",
        "[0]<std>:During handling of the above exception, another exception occurred:\r\n",
        "[0]<std>:\r\n",
        "[0]<std>:Traceback (most recent call last):\r\n",
        '[0]<std>:  File "/code/a.py", line 5, in <module>\r\n',
        "[0]<std>:RuntimeError\r\n",
    ]
    assert failure_line(chained, "/code") == "rank 0 raised RuntimeError (a.py:5)"
    long = [*chained[:2], "[0]<std>:ValueError: " + "x" * 400 + "\n"]
    line = failure_line(long, "/code")
    assert line == "rank 0 raised ValueError: " + "x" * 285 + "... (a.py:3)"
    # A traceback still being written (no exception line yet) is no failure.
    assert failure_line(chained[:2]) is None


def test_an_exit_code_other_than_pythons_is_not_an_earlier_traceback() -> None:
    """A traceback the rank printed and went on from (logging.exception), then sys.exit(3)."""
    lines = [*FRAMES[:2], "[1]<std>:[rank1]: ValueError: handled\n"]
    lines = [line.replace("[2]<std>:[rank2]", "[1]<std>:[rank1]") for line in lines]
    lines += [line for line in fixture("exit3") if not line.startswith("[1]<std>:giving")]
    assert failure_line(lines) == "rank 1 exited with code 3; its last line: started"
