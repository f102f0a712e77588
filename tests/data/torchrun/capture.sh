#!/bin/sh
# Captures the torchrun fixtures beside this file: real torchrun (torch 2.13.0, CPU, gloo), two
# ranks on this machine, stdout and stderr into one file as a pod's log has them. Each script
# below is train.py in one fixed directory, so the tracebacks name the same path every time.
# What varies from run to run (and is left as torchrun wrote it): pids, timestamps, the error
# files' temporary directories, the order of lines that different ranks write at once. The
# Python's prefix (its virtualenv, a path of the machine that captured them) becomes /venv.
#   usage: tests/data/torchrun/capture.sh PYTHON   (a Python with torch 2.13, e.g. .venv/bin/python)
set -eu
python=$1
here=$(cd "$(dirname "$0")" && pwd)
work=/tmp/ci-runner-torchrun-fixture
rm -rf "$work" && mkdir -p "$work"

capture() {  # capture NAME: the script on stdin runs as train.py on 2 ranks; NAME.log its output
    cat >"$work/train.py"
    # The prefix template only as an environment variable: torchrun has no option for it.
    # shellcheck disable=SC2016 # torchrun's template, not the shell's
    (cd "$work" && env PYTHONUNBUFFERED=1 TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE='[${rank}]<std>:' \
        "$python" -m torch.distributed.run --standalone --nproc-per-node 2 --tee 3 --no-python \
        -- "$python" train.py >"$work/$1.log" 2>&1) || true
    prefix=$(cd "$(dirname "$python")/.." && pwd)
    sed "s#$prefix#/venv#g" "$work/$1.log" >"$here/$1.log"
}

capture ok <<'EOF'
"""Both ranks print on stdout and stderr, in turn (barriers and pauses keep the order), then end."""

import sys
import time

import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
for step in range(2):
    for turn in range(dist.get_world_size()):
        if turn == rank:
            print(f"step {step} loss {1.0 / (step + 1 + rank):.4f}", flush=True)
            time.sleep(0.3)
            print(f"rank {rank} warns at step {step}", file=sys.stderr, flush=True)
            time.sleep(0.3)
        dist.barrier()
dist.destroy_process_group()
EOF

capture raise <<'EOF'
"""Rank 1 raises; rank 0 waits in a collective (which then fails: its peer is gone)."""

import time

import torch
import torch.distributed as dist


def check(value: float) -> None:
    raise ValueError(f"boom at {value}")


def main() -> None:
    dist.init_process_group("gloo")
    print("started", flush=True)
    time.sleep(0.5)
    if dist.get_rank() == 1:
        check(0.5)
    dist.all_reduce(torch.ones(1))


main()
EOF

capture raise_record <<'EOF'
"""raise.py with its entry point decorated with torchrun's @record: the error file."""

import time

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record


def check(value: float) -> None:
    raise ValueError(f"boom at {value}")


@record
def main() -> None:
    dist.init_process_group("gloo")
    print("started", flush=True)
    time.sleep(0.5)
    if dist.get_rank() == 1:
        check(0.5)
    dist.all_reduce(torch.ones(1))


main()
EOF

capture raise_early <<'EOF'
"""Rank 1 raises before init_process_group (no [rank1]: prefix from torch's excepthook)."""

import os
import time

settings = {"lr": "0.1"}
if os.environ["RANK"] == "1":
    print(settings["batch_size"])
time.sleep(60)
EOF

capture exit3 <<'EOF'
"""Rank 1 exits with code 3 and no traceback, after a line on stderr; rank 0 sleeps."""

import sys
import time

import torch.distributed as dist

dist.init_process_group("gloo")
print("started", flush=True)
time.sleep(0.5)
if dist.get_rank() == 1:
    print("giving up", file=sys.stderr, flush=True)
    sys.exit(3)
time.sleep(60)
EOF

capture killed <<'EOF'
"""Rank 1 kills itself with SIGKILL; rank 0 sleeps."""

import os
import signal
import time

import torch.distributed as dist

dist.init_process_group("gloo")
print("started", flush=True)
time.sleep(0.5)
if dist.get_rank() == 1:
    os.kill(os.getpid(), signal.SIGKILL)
time.sleep(60)
EOF

rm -rf "$work"
