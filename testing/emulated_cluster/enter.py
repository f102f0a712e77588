"""Start a container: unshare a mount and a PID namespace, fork the container's PID 1, which
builds the root, mounts the volumes, chroots and execs the command; wait for it and end the way it
ended (its exit code, or killed by the same signal: util-linux ``unshare --fork`` 2.38 turns a
signal into exit code 1, so it is not used). Standard library only: ``python -I -S enter.py SPEC``.

SPEC (JSON): root, layers (lower dirs, top first), upper, work, venv {path, lower, upper, work},
binds [{source, target, readOnly, file}], workdir, env {name: value}, argv, error_file,
started_fd (a pipe, closed once the command is exec'd or failed, as runc's exec fifo: ``pid N``
from this process once it forked the container's PID 1, N as this machine numbers it).
"""

import ctypes
import json
import os
import signal
import subprocess
import sys
import traceback
from typing import Any

CLONE_NEWNS = 0x00020000
CLONE_NEWPID = 0x20000000


def mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True)


def inside(root: str, path: str) -> str:
    """``path`` in the container's root with its symlinks resolved inside that root (runc's
    securejoin): /var/run -> /run must lead to the container's /run, never the host's."""
    resolved = root
    parts = [p for p in path.split("/") if p]
    hops = 0
    while parts:
        part = parts.pop(0)
        if part == "..":
            resolved = max(os.path.dirname(resolved), root, key=len)
            continue
        candidate = os.path.join(resolved, part)
        if os.path.islink(candidate):
            hops += 1
            if hops > 40:
                raise OSError(f"too many levels of symbolic links in {path}")
            target = os.readlink(candidate)
            if target.startswith("/"):
                resolved = root
            parts = [p for p in target.split("/") if p] + parts
            continue
        resolved = candidate
    return resolved


DEVICES = ("null", "zero", "full", "random", "urandom", "tty")


def make_dev(dev: str) -> None:
    """A /dev of the container's own, as runc makes it (never the host's /dev itself)."""
    mount("-t", "tmpfs", "-o", "mode=755,nosuid", "tmpfs", dev)
    for name in DEVICES:
        open(os.path.join(dev, name), "a").close()
        mount("--bind", os.path.join("/dev", name), os.path.join(dev, name))
    os.makedirs(os.path.join(dev, "pts"))
    mount(
        "-t",
        "devpts",
        "-o",
        "newinstance,ptmxmode=0666,mode=620",
        "devpts",
        os.path.join(dev, "pts"),
    )
    os.symlink("pts/ptmx", os.path.join(dev, "ptmx"))
    os.makedirs(os.path.join(dev, "shm"))
    mount("-t", "tmpfs", "-o", "mode=1777,nosuid,nodev", "shm", os.path.join(dev, "shm"))
    os.symlink("/proc/self/fd", os.path.join(dev, "fd"))
    for number, name in enumerate(("stdin", "stdout", "stderr")):
        os.symlink(f"/proc/self/fd/{number}", os.path.join(dev, name))


def main() -> None:
    with open(sys.argv[1]) as handle:
        spec = json.load(handle)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNS) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNS)")
    mount("--make-rprivate", "/")
    # After this the next fork is the new namespace's PID 1: nothing may fork before it.
    if libc.unshare(CLONE_NEWPID) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWPID)")
    pid = os.fork()
    if pid == 0:
        try:
            container(spec)
        except BaseException:
            traceback.print_exc()
        os._exit(127)
    # The kubelet signals the container through this PID; one write of a few bytes to a pipe is
    # atomic, so it never mixes with the container's own.
    os.write(spec["started_fd"], f"pid {pid}\n".encode())
    os.close(spec["started_fd"])
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        if number not in (signal.SIGKILL, signal.SIGSTOP):  # these have no handler to reset
            signal.signal(number, signal.SIG_DFL)
        os.kill(os.getpid(), number)
    sys.exit(os.waitstatus_to_exitcode(status))


def container(spec: dict[str, Any]) -> None:
    """PID 1 of the new PID namespace: the root, the mounts, then exec."""
    # Closed by the exec: the kubelet's read of the pipe ends once the command runs.
    os.set_inheritable(spec["started_fd"], False)
    root = spec["root"]
    lower = ":".join(spec["layers"])
    mount(
        "-t",
        "overlay",
        "container",
        "-o",
        f"lowerdir={lower},upperdir={spec['upper']},workdir={spec['work']}",
        root,
    )
    venv = spec["venv"]
    mount(
        "-t",
        "overlay",
        "venv",
        "-o",
        f"lowerdir={venv['lower']},upperdir={venv['upper']},workdir={venv['work']}",
        inside(root, venv["path"]),
    )
    mount("-t", "proc", "proc", inside(root, "/proc"))
    make_dev(inside(root, "/dev"))
    # A sysfs of its own, read-only as runtimes mount it (it shows the pod's network devices).
    mount("-t", "sysfs", "-o", "ro,nosuid,nodev,noexec", "sysfs", inside(root, "/sys"))
    for bind in spec["binds"]:
        target = inside(root, bind["target"])
        if bind.get("file"):
            os.makedirs(os.path.dirname(target), exist_ok=True)
            if not os.path.exists(target):
                open(target, "a").close()
        else:
            os.makedirs(target, exist_ok=True)
        mount("--bind", bind["source"], target)
        if bind.get("readOnly"):
            mount("-o", "remount,bind,ro", target)
    error = open(spec["error_file"], "w")  # noqa: SIM115 (closed by exec, CLOEXEC)
    os.chroot(root)
    os.makedirs(spec["workdir"], exist_ok=True)
    os.chdir(spec["workdir"])
    env = spec["env"]
    argv = spec["argv"]
    try:
        os.execvpe(argv[0], argv, env)
    except OSError as err:
        reason = (
            "executable file not found in $PATH"
            if isinstance(err, FileNotFoundError)
            else err.strerror
        )
        message = (
            "failed to create containerd task: failed to create shim task: OCI runtime create "
            f'failed: runc create failed: unable to start container process: exec: "{argv[0]}": '
            f"{reason}: unknown"
        )
        error.write(message)
        error.close()
        os._exit(128)  # sys.exit would raise SystemExit into main()'s handler: 127


if __name__ == "__main__":
    main()
