#!/usr/bin/env bash
# Installs what `ci-runner train --local` and the emulated cluster need into a virtualenv: torch
# (PyPI's, run on the CPU), Horovod with PyTorch, Gloo and MPI (Debian's OpenMPI, as the stock horovod/horovod image
# has MPI: `horovodrun` without --gloo takes the mpirun-over-ssh path there), and the example's
# libraries. Idempotent: a second run checks and returns in seconds.
#
# Horovod 0.28.1 exists on PyPI only as a source release. It is compiled once into a wheel kept in a
# cache directory outside the repository (keyed by Python, torch and OpenMPI versions, and the
# controllers built in) and installed from there.
#
# Usage: scripts/setup-horovod.sh [VENV]        (VENV defaults to .venv)
# Cache: <cache>/wheels
#        <cache>: ci-runner's cache, as scripts/lib/cache.sh finds it
set -euo pipefail

SETUP_NAME="setup-horovod"
VENV="${1:-.venv}"
PY="$VENV/bin/python"
HOROVOD_VERSION="0.28.1"
# shellcheck source=scripts/lib/setup.sh
. "$(dirname "$0")/lib/setup.sh"
# shellcheck source=scripts/lib/cache.sh
. "$(dirname "$0")/lib/cache.sh"
CACHE_DIR="$(ci_runner_cache_dir)"
WHEEL_DIR="$CACHE_DIR/wheels"
SCRIPT_START=$SECONDS

require_venv

# --- build tools: a C++17 compiler and a CMake that gloo accepts (3.13 <= version < 4) -------------
APT_UPDATED=""
apt_install() {
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        if [ -z "$APT_UPDATED" ]; then
            step "apt-get update" apt-get update -qq
            APT_UPDATED=1
        fi
        step "installing $* with apt-get" bash -c \
            "DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $* >/dev/null"
    else
        fail "missing $*: install it with your system's package manager (e.g. sudo apt-get install $*)"
    fi
}

if ! command -v g++ >/dev/null || ! command -v make >/dev/null; then
    apt_install build-essential
fi

# OpenMPI: mpirun for horovodrun's MPI path, mpicxx and the headers for Horovod's MPI controller.
# (dpkg-query's status, as `dpkg -s` also succeeds for a package removed but not purged.)
if ! command -v mpirun >/dev/null || ! command -v mpicxx >/dev/null \
    || [ "$(dpkg-query -W -f='${Status}' libopenmpi-dev 2>/dev/null)" != "install ok installed" ]; then
    apt_install libopenmpi-dev openmpi-bin
fi
MPI_VERSION="$(mpirun --version 2>/dev/null | head -n1 | awk '{print $NF}')"
[ -n "$MPI_VERSION" ] || fail "mpirun --version printed no version after installing openmpi-bin"

cmake_ok() {
    local version
    command -v cmake >/dev/null || return 1
    version="$(cmake --version | head -n1 | awk '{print $3}')"
    "$PY" - "$version" <<'EOF'
import sys
major, minor = (int(part) for part in sys.argv[1].split(".")[:2])
sys.exit(0 if (3, 13) <= (major, minor) < (4, 0) else 1)
EOF
}

if ! cmake_ok; then
    # The venv's bin directory comes first on PATH below, so a pip-installed cmake is picked up.
    step "installing cmake<4 into $VENV" pip_install "cmake>=3.13,<4"
fi
VENV_BIN="$(cd "$VENV/bin" && pwd)"
export PATH="$VENV_BIN:$PATH"
cmake_ok || fail "cmake 3.13..3.x not found after installing it"

# --- torch (scripts/lib/setup.sh's TORCH_VERSION) ------------------------------------------------
install_torch

# --- the example's libraries and Horovod's build/run dependencies ----------------------------------
if ! have_modules sklearn boto3 numpy cloudpickle psutil yaml packaging wheel; then
    step "installing scikit-learn, boto3 and Horovod's dependencies" pip_install \
        scikit-learn boto3 numpy cloudpickle psutil pyyaml packaging wheel "setuptools<81"
fi

# --- Horovod: build the wheel once, keyed by Python and torch versions -----------------------------
PY_TAG="$("$PY" -c 'import sys; print(f"py{sys.version_info[0]}{sys.version_info[1]}")')"
# The controllers are part of the key: a gloo-only wheel built before must never be taken for this one.
KEY="$PY_TAG-torch$TORCH_VERSION-gloo-openmpi$MPI_VERSION"
KEY_DIR="$WHEEL_DIR/horovod-$HOROVOD_VERSION-$KEY"

find_wheel() {
    find "$KEY_DIR" -maxdepth 1 -name "horovod-$HOROVOD_VERSION-*.whl" 2>/dev/null | head -n1
}

build_wheel() {
    # The extension compiles against Python.h (Debian's system Python keeps it in python3-dev).
    if ! "$PY" -c 'import os, sys, sysconfig
sys.exit(not os.path.isfile(os.path.join(sysconfig.get_paths()["include"], "Python.h")))'; then
        apt_install python3-dev
    fi
    local work
    work="$(mktemp -d "${TMPDIR:-/tmp}/horovod-build.XXXXXX")"
    # shellcheck disable=SC2064
    trap "rm -rf '$work'" EXIT
    "$PY" -m pip download --quiet --disable-pip-version-check --no-deps --no-binary :all: \
        -d "$work" "horovod==$HOROVOD_VERSION"
    tar -xzf "$work/horovod-$HOROVOD_VERSION.tar.gz" -C "$work"
    local src="$work/horovod-$HOROVOD_VERSION"
    # torch 2.13's headers need C++17; Horovod 0.28.1 asks for C++14.
    sed -i 's/CMAKE_CXX_STANDARD 14/CMAKE_CXX_STANDARD 17/' \
        "$src/CMakeLists.txt" "$src/horovod/torch/CMakeLists.txt"
    grep -q 'CMAKE_CXX_STANDARD 17' "$src/horovod/torch/CMakeLists.txt" \
        || fail "could not switch Horovod's torch extension to C++17"
    say "compiling (about 4-10 minutes on 2 cores; compiler output in $work/build.log)"
    # Its own process group (setsid), so that stopping this script stops every compiler too.
    setsid env HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITH_MPI=1 \
        HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1 \
        CMAKE_POLICY_VERSION_MINIMUM=3.5 MAKEFLAGS="-j$(nproc)" \
        "$PY" -m pip wheel --no-build-isolation --no-deps --disable-pip-version-check -v \
        -w "$work/dist" "$src" >"$work/build.log" 2>&1 &
    local pid=$! start=$SECONDS ticks=0 percent
    # shellcheck disable=SC2064
    trap "kill -- -$pid 2>/dev/null; rm -rf '$work'" EXIT
    # A progress line every 30 s: CMake's own percentage from the compiler output.
    while kill -0 "$pid" 2>/dev/null; do
        sleep 1
        ticks=$((ticks + 1))
        if [ $((ticks % 30)) = 0 ]; then
            percent="$( (grep -o '\[ *[0-9]*%\]' "$work/build.log" || true) | tail -n1 | tr -d '[] ')"
            say "still compiling: ${percent:-configuring} after $((SECONDS - start))s"
        fi
    done
    if ! wait "$pid"; then
        tail -n 40 "$work/build.log" >&2
        fail "Horovod build failed (last 40 lines above)"
    fi
    mkdir -p "$KEY_DIR"
    local built
    built="$(ls "$work"/dist/horovod-*.whl)"
    # Copy then rename, so an interrupted copy never looks like a finished wheel.
    cp "$built" "$KEY_DIR/.partial.whl"
    mv "$KEY_DIR/.partial.whl" "$KEY_DIR/$(basename "$built")"
    rm -rf "$work"
    trap - EXIT
}

# What `horovodrun --check-build` said last time, keyed by the installed horovodrun and torch:
# the check takes ~10 s (it starts a process per framework), so it runs only after a change.
STAMP="$VENV/.ci-runner-horovod-check"
install_key() {
    echo "$KEY $(installed_version horovod) $(installed_torch) $(stat -c '%s %Y' "$VENV/bin/horovodrun" 2>/dev/null)"
}

# Which wheel key the virtualenv's Horovod came from (a gloo-only install is rebuilt/reinstalled).
FROM_KEY="$VENV/.ci-runner-horovod-key"
horovod_installed() {
    [ "$(installed_version horovod)" = "$HOROVOD_VERSION" ] && [ -x "$VENV/bin/horovodrun" ] \
        && [ -f "$FROM_KEY" ] && [ "$(cat "$FROM_KEY")" = "$KEY" ] \
        && "$PY" -c 'import glob, importlib.util, os, sys
spec = importlib.util.find_spec("horovod")
sys.exit(not glob.glob(os.path.join(spec.submodule_search_locations[0], "torch", "mpi_lib_v2*.so")))' \
            2>/dev/null
}

horovod_ok() { horovod_installed && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$(install_key)" ]; }

if ! horovod_installed; then
    if [ -z "$(find_wheel)" ]; then
        step "building Horovod $HOROVOD_VERSION wheel ($KEY) into $KEY_DIR" build_wheel
    else
        say "using cached wheel $(find_wheel)"
    fi
    step "installing Horovod from $(find_wheel)" \
        pip_install --force-reinstall --no-deps "$(find_wheel)"
    echo "$KEY" >"$FROM_KEY"
    # Its runtime dependencies (cloudpickle, psutil, pyyaml, packaging) were installed above.
fi

# --- verify ----------------------------------------------------------------------------------------
if ! horovod_ok; then
    say "checking the Horovod build (horovodrun --check-build) ..."
    CHECK="$("$VENV/bin/horovodrun" --check-build)"
    echo "$CHECK" | grep -q '\[X\] PyTorch' || { echo "$CHECK" >&2; fail "Horovod lacks PyTorch support"; }
    echo "$CHECK" | grep -q '\[X\] Gloo' || { echo "$CHECK" >&2; fail "Horovod lacks Gloo support"; }
    echo "$CHECK" | grep -q '\[X\] MPI' || { echo "$CHECK" >&2; fail "Horovod lacks MPI support"; }
    install_key >"$STAMP"
fi
say "Horovod $HOROVOD_VERSION with PyTorch + Gloo + MPI (OpenMPI $MPI_VERSION) ready in $VENV ($((SECONDS - SCRIPT_START))s)"
