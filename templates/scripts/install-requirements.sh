#!/bin/sh
# Install the requirements file of the pinned commit, then mark this pod ready for training.
# Runs in the workers' last init container. Packages go under $CI_RUNNER_DEPS_DIR, which every
# rank sees through PYTHONPATH=<deps>/purelib:<deps>/platlib (horovodrun forwards the launcher's
# environment to the ranks it starts over ssh). The ready file is written only on success.
set -eu

fail() {
    printf 'ci-runner: %s\n' "$*" >&2
    exit 1
}

sha="${CI_RUNNER_SHA:-}"
code_dir="${CI_RUNNER_CODE_DIR:-/ci-runner/code}"
deps_dir="${CI_RUNNER_DEPS_DIR:-/ci-runner/python}"
ready_file="${CI_RUNNER_READY_FILE:-/ci-runner/ready}"
requirements="${CI_RUNNER_REQUIREMENTS:-}"

rm -f "$ready_file"
head="$(git -C "$code_dir" rev-parse HEAD 2>/dev/null)" ||
    fail "no code checked out in $code_dir; fix: the fetch-code init container must run first"
[ "$head" = "$sha" ] ||
    fail "$code_dir is at commit $head, not $sha; fix: the fetch-code init container must run first"

rm -rf "$deps_dir"
mkdir -p "$deps_dir/prefix"
if [ -n "$requirements" ]; then
    [ -f "$code_dir/$requirements" ] ||
        fail "$requirements does not exist in commit $sha; fix: commit it, or correct 'requirements' in train.yaml"
    python="$(command -v python3 || command -v python)" ||
        fail "the image has no python3 or python; fix: use an image with Python and Horovod"
    if ! "$python" -m pip install --no-input --disable-pip-version-check \
        --prefix "$deps_dir/prefix" -r "$code_dir/$requirements"; then
        fail "pip could not install $requirements at commit $sha (its output is above); fix: correct the requirements file, or set PIP_INDEX_URL in train.yaml env"
    fi
fi

# The site-packages directories pip chose under the prefix (lib/... and, on some systems,
# lib64/...) get fixed names, so PYTHONPATH does not depend on the image's Python version.
site_dirs="$(find "$deps_dir/prefix" -maxdepth 4 -type d \( -name site-packages -o -name dist-packages \) | sort)"
purelib="$(printf '%s\n' "$site_dirs" | head -n 1)"
platlib="$(printf '%s\n' "$site_dirs" | tail -n 1)"
if [ -n "$purelib" ]; then
    ln -s "$purelib" "$deps_dir/purelib"
    ln -s "$platlib" "$deps_dir/platlib"
else
    mkdir -p "$deps_dir/purelib" "$deps_dir/platlib"
fi

printf '%s\n' "$sha" >"$ready_file.tmp"
mv "$ready_file.tmp" "$ready_file"
echo "ci-runner: requirements installed; ready at commit $sha"
