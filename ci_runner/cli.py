"""``ci-runner``: the command line. The only place that reads the process's environment.

Exit codes, as pre-commit has them: 0 success; 1 an expected failure (a
:class:`~ci_runner.errors.CiRunnerError`: a user mistake or a failed training, its lines on
stderr, never a traceback); 2 a usage error (argparse); 3 a bug in ci-runner (one line on stderr,
the traceback in a crash log that starts with the versions of ci-runner, Python, the platform and
git); 130 interrupted (Ctrl-C, or a cancelled training).
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final, NoReturn, TextIO

from ci_runner import __version__
from ci_runner.commands import cancel, render, train, validate
from ci_runner.commands.common import Command, Runtime
from ci_runner.errors import EXIT_BUG, EXIT_INTERRUPTED, CiRunnerError
from ci_runner.settings import read_settings

ERROR_PREFIX: Final = "ci-runner: error: "
GIT_VERSION_SECONDS: Final = 10  # how long `git --version` may take in a crash report


# The subcommands, in the order `ci-runner --help` lists them. Add one entry per subcommand.
COMMANDS: Final[list[Command]] = [validate.COMMAND, render.COMMAND, train.COMMAND, cancel.COMMAND]


def main(
    argv: Sequence[str] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
    crash_dir: Path | None = None,
) -> int:
    """Run ``ci-runner argv`` and return its exit code; the process's state is the default."""
    runtime = Runtime(
        settings=read_settings(os.environ if env is None else env),
        cwd=cwd or Path.cwd(),
        stdout=stdout or sys.stdout,
        stderr=stderr or sys.stderr,
    )
    try:
        parser = _parser(runtime)
        try:
            args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
        except _ParserExit as exit_:
            return exit_.code
        code: int = args.run(args, runtime)
        return code
    except CiRunnerError as error:
        masker = runtime.console.masker
        for line in error.lines():
            runtime.stderr.write(masker.mask(f"{ERROR_PREFIX}{line}\n"))
        return error.exit_code
    except KeyboardInterrupt:
        runtime.stderr.write(f"{ERROR_PREFIX}interrupted\n")
        return EXIT_INTERRUPTED
    except Exception as error:  # a bug: keep the details, show one line
        masker = runtime.console.masker
        report = f"{versions()}\n{traceback.format_exc()}"
        log = _write_crash_log(masker.mask(report), crash_dir)
        summary = masker.mask(f"{type(error).__name__}: {error}".splitlines()[0])
        runtime.stderr.write(
            f"{ERROR_PREFIX}internal error ({summary}); the traceback is in {log}: "
            "please attach it to a bug report\n"
        )
        return EXIT_BUG


def versions() -> str:
    """What a bug report needs first: ci-runner, Python, the platform and git, a line each."""
    try:
        git = subprocess.run(
            ["git", "--version"],
            capture_output=True,
            text=True,
            check=False,
            timeout=GIT_VERSION_SECONDS,
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired) as error:
        git = f"git: not available ({error})"
    python = f"{platform.python_implementation()} {platform.python_version()}"
    return "\n".join(
        [f"ci-runner {__version__}", f"Python {python}", f"platform {platform.platform()}", git]
    )


def main_entry() -> NoReturn:
    """The ``ci-runner`` console script."""
    sys.exit(main())


def _write_crash_log(text: str, crash_dir: Path | None) -> Path:
    directory = crash_dir or Path(tempfile.gettempdir())
    directory.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix="ci-runner-crash-", suffix=".log", dir=directory)
    with os.fdopen(fd, "w", encoding="utf-8") as file:
        file.write(text)
    return Path(name)


class _ParserExit(Exception):
    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def _parser(runtime: Runtime) -> argparse.ArgumentParser:
    class Parser(argparse.ArgumentParser):
        """argparse writing to the injected streams and returning instead of exiting."""

        def _print_message(self, message: str, file: object = None) -> None:
            if message:
                (runtime.stderr if file is sys.stderr else runtime.stdout).write(message)

        def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
            if message:
                runtime.stderr.write(message)
            raise _ParserExit(status)

    parser = Parser(
        prog="ci-runner",
        description="Horovod training on Kubernetes from GitLab CI, pinned to a commit.",
    )
    parser.add_argument("--version", action="version", version=f"ci-runner {__version__}")
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)
    for command in COMMANDS:
        sub = subparsers.add_parser(command.name, help=command.help, description=command.help)
        command.add_arguments(sub)
        sub.set_defaults(run=command.run)
    return parser
