#!/usr/bin/env bash
# Installs what `ci-runner train --local` needs for a `distributed: torchrun` train.yaml into a
# virtualenv: torch (PyPI's, run on the CPU; the version scripts/setup-horovod.sh pins) and the
# example's libraries. No Horovod, no MPI, no compiler: torchrun and DDP (gloo) are part of torch.
# Idempotent: a second run checks and returns in about a second.
#
# Usage: scripts/setup-torch.sh [VENV]        (VENV defaults to .venv)
set -euo pipefail

VENV="${1:-.venv}"
PY="$VENV/bin/python"
TORCH_VERSION="2.13.0" # setup-horovod.sh's (tests/test_example_ddp.py checks they agree)
SCRIPT_START=$SECONDS

say() { echo "[setup-torch] $*"; }
fail() { echo "[setup-torch] error: $*" >&2; exit 1; }

# Runs a long step: one line before it, the elapsed time after it.
step() {
    local what="$1"
    shift
    local start=$SECONDS
    say "$what ..."
    "$@"
    say "$what: done in $((SECONDS - start))s"
}

pip_install() { "$PY" -m pip install --quiet --disable-pip-version-check "$@"; }

[ -x "$PY" ] || fail "no virtualenv at $VENV (create it first: make env)"

# --- torch (PyPI's wheel: the CUDA build, whose nvidia-* libraries it loads; it runs on the CPU) -
# Versions come from package metadata: importing torch would cost seconds on every run.
installed_torch() {
    "$PY" -c 'import importlib.metadata as m; print(m.version("torch").split("+")[0])' \
        2>/dev/null || true
}
if [ "$(installed_torch)" != "$TORCH_VERSION" ]; then
    step "installing torch==$TORCH_VERSION" pip_install "torch==$TORCH_VERSION"
fi
[ "$(installed_torch)" = "$TORCH_VERSION" ] || fail "torch $TORCH_VERSION did not install"

# --- the example's libraries (examples/simple_ml/requirements.txt finds them installed) -----------
MODULES=(sklearn boto3 numpy)
if ! "$PY" -c 'import importlib.util, sys; sys.exit(any(importlib.util.find_spec(m) is None for m in sys.argv[1:]))' \
    "${MODULES[@]}" 2>/dev/null; then
    step "installing scikit-learn and boto3" pip_install scikit-learn boto3 numpy
fi

# --- verify: torchrun's module and gloo (DDP on the CPU), once per installed torch ----------------
STAMP="$VENV/.ci-runner-torch-check"
install_key() {
    "$PY" -c 'import importlib.util, os; s = os.stat(importlib.util.find_spec("torch").origin)
print(s.st_size, s.st_mtime_ns)'
}
KEY="$TORCH_VERSION $(install_key)"
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$KEY" ]; then
    say "checking torch's launcher and gloo (import torch.distributed.run) ..."
    "$PY" -c 'import sys, torch.distributed as dist, torch.distributed.run
sys.exit(not (dist.is_available() and dist.is_gloo_available()))' \
        || fail "torch $TORCH_VERSION in $VENV has no torch.distributed with gloo"
    echo "$KEY" >"$STAMP"
fi
say "torch $TORCH_VERSION with torchrun and gloo ready in $VENV ($((SECONDS - SCRIPT_START))s)"
