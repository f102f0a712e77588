#!/bin/sh
# Install the requirements file of the pinned commit, then mark this pod ready for training.
# Runs in the workers' last init container. Packages go into a virtualenv in the pod's emptyDir,
# $CI_RUNNER_VENV, which sees the image's packages too; the launcher puts its bin directory first
# on PATH, which horovodrun gives every rank, so `python` is the virtualenv's: .pth files and
# console scripts work. pip runs from the code directory, so a requirement given as a path
# (./libs/pkg) is the commit's. The ready file is written only on success.
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

rm -f "$ready_file"
head="$(git -C "$code_dir" rev-parse HEAD 2>/dev/null)" ||
    fail "no code checked out in $code_dir; fix: the fetch-code init container must run first"
[ "$head" = "$sha" ] ||
    fail "$code_dir is at commit $head, not $sha; fix: the fetch-code init container must run first"
python="$(command -v python3 || command -v python)" ||
    fail "the image has no python3 or python; fix: use an image with Python and Horovod"

rm -rf "$venv"
"$python" -m venv --without-pip --system-site-packages "$venv" ||
    fail "cannot make a virtualenv with $python -m venv; fix: use an image whose Python has the venv module"
# When the image's Python is itself a virtualenv, --system-site-packages reaches the Python below
# it, not the image's packages: a .pth file adds the image's site directories the new one lacks.
venv_site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')"
"$venv/bin/python" -c 'import sys; print("\n".join(sys.path))' >"$venv/.ci-runner-seen"
"$python" - "$venv_site/_ci_runner_image.pth" "$venv/.ci-runner-seen" <<'PY'
import sys

with open(sys.argv[2]) as seen_file:
    seen = set(seen_file.read().splitlines())
dirs = [p for p in sys.path if p.endswith(("site-packages", "dist-packages")) and p not in seen]
with open(sys.argv[1], "w") as pth:
    pth.write("".join("import site; site.addsitedir(%r)\n" % d for d in dirs))
PY
rm -f "$venv/.ci-runner-seen"
# Each rank's output lines reach mpirun whole. PYTHONUNBUFFERED makes print() two writes (the text,
# then the newline), and mpirun's --tag-output tags each write: another rank's line could land
# between them, on the same line of the CI log. Line buffering writes a line at once and still
# flushes at every newline or carriage return (progress bars).
printf '%s\n' 'import sys; [s.reconfigure(line_buffering=True, write_through=False) for s in (sys.stdout, sys.stderr) if hasattr(s, "reconfigure")]' \
    >"$venv_site/_ci_runner_line_buffered.pth"

if [ -n "$requirements" ]; then
    [ -f "$code_dir/$requirements" ] ||
        fail "$requirements does not exist in commit $sha; fix: commit it, or correct 'requirements' in train.yaml"
    cd "$code_dir"
    # pip compiles every module it installs to bytecode: seconds for large libraries, most of whose
    # modules training never imports. Python compiles what a rank imports, when it imports it.
    # A PIP_NO_COMPILE in train.yaml's env is left to pip (which reads PIP_NO_COMPILE=1 as "compile").
    no_compile="--no-compile"
    [ -z "${PIP_NO_COMPILE+set}" ] || no_compile=""
    if ! "$venv/bin/python" -m pip install --no-input --disable-pip-version-check $no_compile \
        -r "$requirements"; then
        fail "pip could not install $requirements at commit $sha (its output is above); fix: correct the requirements file, or set PIP_INDEX_URL in train.yaml env"
    fi
fi

printf '%s\n' "$sha" >"$ready_file.tmp"
mv "$ready_file.tmp" "$ready_file"
echo "ci-runner: requirements installed; ready at commit $sha"
