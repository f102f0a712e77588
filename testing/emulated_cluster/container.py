"""One container instance as a process tree: ``nsenter`` into the pod's network and UTS
namespaces, then :mod:`.enter` unshares a mount and PID namespace, builds the root and execs the
command as PID 1 there (so, as in a container, SIGTERM reaches it only if it handles SIGTERM).
The process is in the container's memory cgroup; stdout and stderr go to a CRI log file."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from testing.emulated_cluster.cgroups import Cgroup
from testing.emulated_cluster.crilog import LogFile
from testing.emulated_cluster.image import Image

ENTER = Path(__file__).with_name("enter.py")


@dataclass(frozen=True)
class Sandbox:
    """The pod's namespaces (``netns`` None: the host network)."""

    netns: str | None
    uts: Path


@dataclass(frozen=True)
class Exit:
    code: int
    reason: str  # Completed, Error, OOMKilled, StartError
    message: str


def _nsenter(sandbox: Sandbox) -> list[str]:
    args = ["nsenter", f"--uts={sandbox.uts}"]
    if sandbox.netns:
        args.append(f"--net=/run/netns/{sandbox.netns}")
    return [*args, "--"]


def _read_to_end(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 4096):
        chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks)


class ContainerProcess:
    """Start with :meth:`start`; :meth:`wait` gives the :class:`Exit`."""

    def __init__(
        self,
        directory: Path,
        sandbox: Sandbox,
        image: Image,
        cgroup: Cgroup,
        log: LogFile,
        argv: list[str],
        env: dict[str, str],
        workdir: str,
        binds: list[dict[str, object]],
    ) -> None:
        self.directory = directory
        self.sandbox = sandbox
        self.image = image
        self.cgroup = cgroup
        self.log = log
        self.argv = argv
        self.env = env
        self.workdir = workdir
        self.binds = binds
        self.process: subprocess.Popen[bytes] | None = None
        self.pid: int | None = None  # the container's PID 1, seen from the host
        self.started_at = 0.0

    def start(self) -> None:
        if self.directory.exists():
            shutil.rmtree(self.directory)
        for sub in ("root", "upper", "work", "venv-upper", "venv-work"):
            (self.directory / sub).mkdir(parents=True)
        spec: dict[str, object] = {
            "root": str(self.directory / "root"),
            "layers": [str(self.image.layer), "/"],
            "upper": str(self.directory / "upper"),
            "work": str(self.directory / "work"),
            "venv": {
                "path": str(self.image.venv),
                "lower": str(self.image.venv),
                "upper": str(self.directory / "venv-upper"),
                "work": str(self.directory / "venv-work"),
            },
            "binds": self.binds,
            "workdir": self.workdir,
            "env": self.env,
            "argv": self.argv,
            "error_file": str(self.directory / "start-error"),
        }
        started_r, started_w = os.pipe()
        spec["started_fd"] = started_w
        spec_path = self.directory / "spec.json"
        spec_path.write_text(json.dumps(spec))
        argv = [
            *_nsenter(self.sandbox),
            sys.executable,
            "-I",
            "-S",
            str(ENTER),
            str(spec_path),
        ]
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        self.process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out_w,
            stderr=err_w,
            preexec_fn=self.cgroup.add_self,
            start_new_session=True,
            env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
            pass_fds=(started_w,),
        )
        os.close(out_w)
        os.close(err_w)
        os.close(started_w)
        # EOF once the command is exec'd (or the start failed): no poll of /proc, which a
        # container that ends at once (an init container with nothing to do) would never satisfy.
        said = _read_to_end(started_r).decode().splitlines()
        self.log.pump(out_r, "stdout")
        self.log.pump(err_r, "stderr")
        self.started_at = time.time()
        self.pid = next((int(line[4:]) for line in said if line.startswith("pid ")), None)

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_closed(self) -> bool:
        return self.log.closed

    def signal(self, sig: signal.Signals) -> None:
        target = self.pid if self.pid is not None else (self.process.pid if self.process else None)
        if target is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(target, sig)

    def wait(self, timeout: float | None = None) -> Exit:
        assert self.process is not None
        returncode = self.process.wait(timeout)
        self.log.close()
        code = 128 + (-returncode) if returncode < 0 else returncode
        error = self.directory / "start-error"
        if code == 128 and error.is_file() and error.read_text():
            return Exit(128, "StartError", error.read_text())
        if self.cgroup.oom_killed():
            return Exit(137, "OOMKilled", "")
        return Exit(code, "Completed" if code == 0 else "Error", "")

    def exec(self, argv: list[str], timeout: float) -> tuple[int, str]:
        """Run a command in the container (an exec probe): its namespaces, root, cwd and env."""
        if self.pid is None:
            return 1, "container has no process"
        env = [f"{k}={v}" for k, v in self.env.items()]
        command = [
            "nsenter",
            "-t",
            str(self.pid),
            "-m",
            "-u",
            "-n",
            "-p",
            "-r",
            "-w",
            "--",
            "/usr/bin/env",
            "-i",
            *env,
            *argv,
        ]
        try:
            done = subprocess.run(
                command,
                capture_output=True,
                timeout=timeout,
                preexec_fn=self.cgroup.add_self,
            )
        except subprocess.TimeoutExpired:
            return -1, f"command timed out after {timeout:g}s"
        return done.returncode, (done.stdout + done.stderr).decode(errors="replace")
