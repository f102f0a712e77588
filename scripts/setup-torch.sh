#!/usr/bin/env bash
# Installs what `ci-runner train --local` needs for a `distributed: torchrun` train.yaml into a
# virtualenv: torch (PyPI's, run on the CPU; the version scripts/lib/setup.sh pins, which
# scripts/setup-horovod.sh builds Horovod against) and the example's libraries. No Horovod, no MPI,
# no compiler: torchrun and DDP (gloo) are part of torch.
# Idempotent: a second run checks and returns in about a second.
#
# Usage: scripts/setup-torch.sh [VENV]        (VENV defaults to .venv)
set -euo pipefail

SETUP_NAME="setup-torch"
VENV="${1:-.venv}"
PY="$VENV/bin/python"
# shellcheck source=scripts/lib/setup.sh
. "$(dirname "$0")/lib/setup.sh"
SCRIPT_START=$SECONDS

require_venv

# --- torch -----------------------------------------------------------------------------------------
install_torch

# --- the example's libraries (examples/simple_ml/requirements.txt finds them installed) -----------
if ! have_modules sklearn boto3 numpy; then
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
