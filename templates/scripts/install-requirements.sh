#!/bin/sh
# Install the requirements file of the pinned commit, then mark this pod ready for training.
# Runs in the workers' last init container. Packages go into a virtualenv in the pod's emptyDir,
# $CI_RUNNER_VENV, which sees the image's packages too; the launcher puts its bin directory first
# on PATH, which horovodrun gives every rank, so `python` is the virtualenv's: .pth files and
# console scripts work. pip runs from the code directory, so a requirement given as a path
# (./libs/pkg) is the commit's. The ready file is written only on success. uv installs them when
# fetch-code left the setup image's uv at $CI_RUNNER_UV and it can do what pip would
# (uv_install.py); pip otherwise.
#
# With a pip cache claim, $CI_RUNNER_VENV_CACHE is a directory on it that keeps each virtualenv it
# made under a key: the requirements files' bytes (with those they include by -r or -c), the
# image's Python and the distributions it has, and the PIP_* settings. A pod whose key is there
# links $CI_RUNNER_VENV to it and runs no pip at all (8-9 s of a start); the worker
# container mounts the claim at the same path, and every pod builds at the same $CI_RUNNER_VENV,
# so the scripts' #! lines hold: uv's virtualenv is made on the claim and linked there, pip's in
# the pod. Requirements that name a local path (./libs/pkg, -e .) may change
# with any commit: they are never cached. A kept virtualenv no pod used for
# $CI_RUNNER_VENV_CACHE_DAYS days (14) is removed by the next pod that stores one.
set -eu

fail() {
    printf 'ci-runner: %s\n' "$*" >&2
    exit 1
}

sha="${CI_RUNNER_SHA:-}"
code_dir="${CI_RUNNER_CODE_DIR:-/ci-runner/code}"
venv="${CI_RUNNER_VENV:-/ci-runner/venv}"
ready_file="${CI_RUNNER_READY_FILE:-/ci-runner/ready}"
requirements="${CI_RUNNER_REQUIREMENTS:-}"
venv_cache="${CI_RUNNER_VENV_CACHE:-}"

rm -f "$ready_file"
# fetch-code (in the project's setup image) left a detached HEAD: read without git, which
# train.yaml's image need not have, and which that image's PATH could make anything.
head="$(cat "$code_dir/.git/HEAD" 2>/dev/null)" ||
    fail "no code checked out in $code_dir; fix: the fetch-code init container must run first"
[ "$head" = "$sha" ] ||
    fail "$code_dir is at commit $head, not $sha; fix: the fetch-code init container must run first"
python="$(command -v python3 || command -v python)" ||
    fail "the image has no python3 or python; fix: use an image with Python and Horovod"
# The virtualenv's key, its .pth files and its cache are Python's, run by the image's Python: the
# ConfigMap holds venv_layer.py beside this script.
scripts="$(cd "$(dirname "$0")" && pwd)"
venv_layer="$scripts/venv_layer.py"
uv="${CI_RUNNER_UV-/ci-runner/tools/uv}"

ready() {
    printf '%s\n' "$sha" >"$ready_file.tmp"
    mv "$ready_file.tmp" "$ready_file"
    echo "ci-runner: $1; ready at commit $sha"
}

if [ -n "$requirements" ]; then
    [ -f "$code_dir/$requirements" ] ||
        fail "$requirements does not exist in commit $sha; fix: commit it, or correct 'requirements' in train.yaml"
fi

key=""
if [ -n "$venv_cache" ] && [ -n "$requirements" ]; then
    key="$(cd "$code_dir" && "$python" "$venv_layer" key "$requirements")" || key=""
fi
if [ -n "$key" ] && [ -f "$venv_cache/$key/.ci-runner-complete" ]; then
    rm -rf "$venv"
    ln -s "$venv_cache/$key" "$venv"
    touch "$venv_cache/$key/.ci-runner-complete" 2>/dev/null || true # when it was last used
    ready "requirements from the virtualenv cache ($key)"
    exit 0
fi

make_venv() { # in the pod, unless $venv is already a link to one made on the claim
    [ -L "$venv" ] || "$python" -m venv --without-pip --system-site-packages "$venv" ||
        fail "cannot make a virtualenv with $python -m venv; fix: use an image whose Python has the venv module"
    # The image's site directories, which --system-site-packages misses when that Python is itself
    # a virtualenv, and line-buffered output for every rank.
    "$python" "$venv_layer" pth "$venv"
}

rm -rf "$venv"
# uv installs in a virtualenv made on the claim, beside its own cache there: it links the files
# of its cache instead of copying them, and keeping the virtualenv is a rename. pip copies from
# its cache anyway, so pip's virtualenv is made in the pod and copied to the claim after. The
# pods see either at $venv.
built=""
if [ -n "$key" ] && [ -n "$uv" ] && [ -f "$uv" ]; then
    if ! built="$("$python" "$venv_layer" build "$venv_cache" "$key" 2>/dev/null)" ||
        ! "$python" -m venv --without-pip --system-site-packages --prompt "$(basename "$venv")" \
            "$built" >/dev/null 2>&1 ||
        ! ln -s "$built" "$venv"; then
        [ -z "$built" ] || rm -rf "$built"
        built=""
    fi
fi
make_venv

if [ -n "$requirements" ]; then
    cd "$code_dir"
    # pip compiles every module it installs to bytecode: seconds for large libraries, most of whose
    # modules training never imports. Python compiles what a rank imports, when it imports it.
    # A PIP_NO_COMPILE in train.yaml's env is left to pip (which reads PIP_NO_COMPILE=1 as "compile").
    no_compile="--no-compile"
    [ -z "${PIP_NO_COMPILE+set}" ] || no_compile=""
    if [ -n "$uv" ] && [ -f "$uv" ] && "$venv/bin/python" "$scripts/uv_install.py" "$uv" "$requirements"; then
        : # uv installed them
    else
        if [ -n "$built" ]; then
            # pip installs as without uv: in a virtualenv of the pod's.
            rm -rf "$venv" "$built"
            built=""
            make_venv
        fi
        "$venv/bin/python" -m pip install --no-input --disable-pip-version-check $no_compile \
            -r "$requirements" ||
            fail "pip could not install $requirements at commit $sha (its output is above); fix: correct the requirements file, or set PIP_INDEX_URL in train.yaml env"
    fi
fi

days="${CI_RUNNER_VENV_CACHE_DAYS:-14}"
if [ -n "$built" ]; then
    "$python" "$venv_layer" keep "$built" "$venv_cache" "$key" "$days" "$venv" ||
        echo "ci-runner: could not keep the virtualenv in $venv_cache (the output is above); the next start installs again" >&2
elif [ -n "$key" ]; then
    # The cache is an optimisation: a claim that is full or read-only fails no job.
    "$python" "$venv_layer" store "$venv" "$venv_cache" "$key" "$days" ||
        echo "ci-runner: could not keep the virtualenv in $venv_cache (the output is above); the next start installs again" >&2
fi
ready "requirements installed"
