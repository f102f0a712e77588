# shellcheck shell=bash
# What scripts/setup-horovod.sh and scripts/setup-torch.sh share: their messages, timed steps, pip
# and package checks in the virtualenv they set up, and the one torch both install (Horovod is
# built against it). Bash, sourced once SETUP_NAME (the messages' prefix), VENV and PY are set:
#     SETUP_NAME="setup-torch"
#     VENV="${1:-.venv}"
#     PY="$VENV/bin/python"
#     # shellcheck source=scripts/lib/setup.sh
#     . "$(dirname "$0")/lib/setup.sh"

# torch: PyPI's wheel (the CUDA build, whose nvidia-* libraries it loads; it runs on the CPU).
TORCH_VERSION="2.13.0"

say() { echo "[$SETUP_NAME] $*"; }
fail() { echo "[$SETUP_NAME] error: $*" >&2; exit 1; }

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

require_venv() { [ -x "$PY" ] || fail "no virtualenv at $VENV (create it first: make env)"; }

# Versions come from package metadata: importing torch would cost seconds on every run.
installed_version() {
    "$PY" -c 'import importlib.metadata as m, sys; print(m.version(sys.argv[1]).split("+")[0])' \
        "$1" 2>/dev/null || true
}
installed_torch() { installed_version torch; }

# Whether every module named can be imported (without importing any).
have_modules() {
    "$PY" -c 'import importlib.util, sys; sys.exit(any(importlib.util.find_spec(m) is None for m in sys.argv[1:]))' \
        "$@" 2>/dev/null
}

install_torch() {
    if [ "$(installed_torch)" != "$TORCH_VERSION" ]; then
        step "installing torch==$TORCH_VERSION" pip_install "torch==$TORCH_VERSION"
    fi
    [ "$(installed_torch)" = "$TORCH_VERSION" ] || fail "torch $TORCH_VERSION did not install"
}
