"""A stand-in for torchrun (``python -m torch.distributed.run``) in fast tests: the options
``train --local`` gives it (any other is refused, exit 2, as torch 2.13's argparse does), the
ranks' variables torchrun sets, and each line teed with the prefix template of
``$TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE`` filled in (``[1]<std>:text``), torch 2.13's only way
to set it.

:func:`install` writes a ``torch`` package whose ``torch.distributed.run`` runs this file: put its
directory first on ``PYTHONPATH``. Like a launcher that is killed hard, it does not stop its ranks
on SIGTERM (each is in a session of its own): ci-runner must find and stop them itself. A failed
rank makes it exit 1, as torchrun does (its ChildFailedError), whatever the rank's own code.
Each invocation's argv is appended (one JSON list a line) to ``$FAKE_TORCHRUN_RECORD`` if set.

With ``$FAKE_TORCHRUN_REPLAY`` (a log of real torchrun, tests/data/torchrun/*.log) it starts no
rank: it writes that log as it is and exits as real torchrun did, 1 after its report
(``ChildFailedError``), else 0.
"""

from __future__ import annotations

import os
import string
import sys
from pathlib import Path

if not __package__:  # run as a script, outside ci-runner's environment: testing/ is beside it
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from testing.fake_launcher import Relay, record_argv, run_ranks, write_all

_VALUED = {
    "--nproc-per-node",
    "--tee",
    "--nnodes",
    "--node-rank",
    "--rdzv-backend",
    "--master-addr",
    "--master-port",
    "--log-dir",
}
_FLAGS = {"--standalone", "--no-python"}


def install(directory: Path) -> Path:
    """A fake ``torch`` package in ``directory`` whose ``torch.distributed.run`` is this file;
    returns ``directory`` (for ``PYTHONPATH``)."""
    package = directory / "torch" / "distributed"
    package.mkdir(parents=True)
    (directory / "torch" / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "run.py").write_text(
        f"import runpy\nrunpy.run_path({str(Path(__file__).resolve())!r}, run_name='__main__')\n"
    )
    return directory


def _options(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    """torchrun's options (``--name``: value, or "" for a flag) and the command after ``--``;
    SystemExit(2) for an option torchrun does not know."""
    options: dict[str, str] = {}
    i = 0
    while i < len(argv) and argv[i] != "--":
        name = argv[i]
        if name not in _VALUED | _FLAGS:
            print(f"run.py: error: unrecognized arguments: {name}", file=sys.stderr)
            raise SystemExit(2)
        options[name] = argv[i + 1] if name in _VALUED else ""
        i += 2 if name in _VALUED else 1
    return options, argv[i + 1 :]


def _replay(log: Path) -> int:
    """Write ``log`` (what real torchrun wrote) and exit with its exit code."""
    data = log.read_bytes()
    write_all(sys.stdout.buffer, data)
    sys.stdout.buffer.flush()
    return 1 if b"ChildFailedError" in data else 0


def main(argv: list[str]) -> int:
    record_argv("FAKE_TORCHRUN_RECORD", argv)
    options, command = _options(argv)
    replay = os.environ.get("FAKE_TORCHRUN_REPLAY")
    if replay:
        return _replay(Path(replay))
    if not Path(options.get("--log-dir", ".")).is_dir():
        print(f"no log directory {options['--log-dir']}", file=sys.stderr)
        return 1
    size = int(options.get("--nproc-per-node", "1"))
    default = "[default${local_rank}]:"  # torchrun's own: the role and the local rank
    template = string.Template(os.environ.get("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", default))
    environments = [
        {
            **os.environ,
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": str(size),
            "LOCAL_WORLD_SIZE": str(size),
            "MASTER_ADDR": "localhost",
            "MASTER_PORT": "29500",
        }
        for rank in range(size)
    ]

    def relays(rank: int) -> tuple[Relay, Relay]:
        prefix = template.safe_substitute(rank=rank, local_rank=rank, role_name="default").encode()
        return (prefix, sys.stdout.buffer), (prefix, sys.stderr.buffer)

    codes = run_ranks(command, environments, relays)
    return 1 if any(codes) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
