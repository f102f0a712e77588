"""ci_runner.config.command: the warnings for a command that starts MPI again or holds shell
syntax no shell will read, one line each with the fix."""

from __future__ import annotations

import shlex

import pytest

from ci_runner.config.command import command_warnings

LAUNCHER = (
    "train.yaml: command starts with {0}, but ci-runner starts mpirun itself and runs command "
    "inside each rank, so every rank would start {0} again; fix: write only what each rank "
    "runs, e.g. command: python train.py (workers and slots_per_worker say how many ranks)"
)
SHELL = (
    "train.yaml: command holds shell syntax ({0}) that no shell reads: each rank runs command "
    "as a program and its arguments, which get these words as they are; fix: put the steps in "
    "a script in the repository and run that (command: sh train.sh), and read variables in "
    "your code (os.environ)"
)


def warnings(command: str) -> list[str]:
    return command_warnings(shlex.split(command), "train.yaml")


@pytest.mark.parametrize("program", ["horovodrun", "mpirun", "/usr/bin/mpiexec"])
def test_a_command_that_starts_mpi_itself(program: str) -> None:
    name = program.rsplit("/", 1)[-1]
    assert warnings(f"{program} -np 2 python train.py") == [LAUNCHER.format(name)]


def test_the_seeds_command_gets_both_warnings() -> None:
    assert warnings("horovodrun -np 3 -H $HOSTS python train.py") == [
        LAUNCHER.format("horovodrun"),
        SHELL.format("'$HOSTS'"),
    ]
    assert warnings(
        "sleep 1m && git clone https://x/y.git && cd y; python train.py > out.log 2>&1 | tee"
    ) == [SHELL.format("'&&', '&&', 'y;' and 3 more")]


@pytest.mark.parametrize(
    ("command", "shown"),
    [
        ("python train.py --data ${DATA_URI}", "'${DATA_URI}'"),
        ("python train.py --sha $(git rev-parse HEAD)", "'$(git'"),
        ("python train.py `date`", "'`date`'"),
        ("python a.py || python b.py", "'||'"),
        ("python a.py & wait", "'&'"),
        ("python a.py < in.txt", "'<'"),
    ],
)
def test_shell_syntax(command: str, shown: str) -> None:
    assert warnings(command) == [SHELL.format(shown)]


@pytest.mark.parametrize(
    "command",
    [
        "python train.py --epochs 3",
        "python -c \"import os; print(os.environ['DATA_URI'])\"",  # inside one argument
        "python train.py --pattern 'loss$'",  # a $ that names no variable
        "sh -c 'pip install -e . && python train.py $EPOCHS'",  # an explicit shell
        "bash scripts/train.sh",
    ],
)
def test_no_warning(command: str) -> None:
    assert warnings(command) == []


def test_a_long_word_is_cut_in_the_warning() -> None:
    word = "$" + "X" * 60
    assert warnings(f"python {word}") == [SHELL.format(repr(word[:39] + "…"))]
