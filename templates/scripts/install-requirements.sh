#!/bin/sh
# Install the requirements file of the pinned commit, then mark this pod ready for training.
# Runs in the workers' last init container. Packages go into a virtualenv in the pod's emptyDir,
# $CI_RUNNER_VENV, which sees the image's packages too; the launcher puts its bin directory first
# on PATH, which horovodrun gives every rank, so `python` is the virtualenv's: .pth files and
# console scripts work. pip runs from the code directory, so a requirement given as a path
# (./libs/pkg) is the commit's. The ready file is written only on success.
#
# With a pip cache claim, $CI_RUNNER_VENV_CACHE is a directory on it that keeps each virtualenv it
# made under a key: the requirements files' bytes (with those they include by -r or -c), the
# image's Python and the distributions it has, and the PIP_* settings. A pod whose key is there
# links $CI_RUNNER_VENV to it and runs no pip at all (8-9 s of a start); the worker
# container mounts the claim at the same path, and every pod builds at the same $CI_RUNNER_VENV,
# so the scripts' #! lines hold. Requirements that name a local path (./libs/pkg, -e .) may change
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
head="$(git -C "$code_dir" rev-parse HEAD 2>/dev/null)" ||
    fail "no code checked out in $code_dir; fix: the fetch-code init container must run first"
[ "$head" = "$sha" ] ||
    fail "$code_dir is at commit $head, not $sha; fix: the fetch-code init container must run first"
python="$(command -v python3 || command -v python)" ||
    fail "the image has no python3 or python; fix: use an image with Python and Horovod"

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
    key="$(cd "$code_dir" && "$python" - "$requirements" <<'PY'
import hashlib
import os
import sys
import sysconfig

digest = hashlib.sha256(b"ci-runner virtualenv 1\0")


def add(label, data):
    digest.update(label.encode() + b"\0" + data + b"\0")


def local(token):
    return token.startswith((".", "/", "~", "file:")) or os.path.exists(token)


def read(path, seen):
    """Add the file and those it includes; the local path it names, if any."""
    if path in seen:
        return None
    seen.add(path)
    with open(path, "rb") as file:
        data = file.read()
    add("file " + path, data)
    for line in data.decode("utf-8", "replace").splitlines():
        tokens = line.split(" #")[0].split()
        if not tokens or tokens[0].startswith("#"):
            continue
        option, _, value = tokens[0].partition("=")
        if not value and len(tokens) > 1:
            value = tokens[1]
        if option in ("-r", "--requirement", "-c", "--constraint"):
            found = read(os.path.join(os.path.dirname(path), value), seen)
            if found:
                return found
        elif option in ("-e", "--editable") or any(local(t) for t in tokens) or "file:" in line:
            return line.strip()
    return None


try:
    found = read(os.path.normpath(sys.argv[1]), set())
except OSError as error:
    found = "%s (%s)" % (error.filename, error.strerror)
if found:
    print("ci-runner: the virtualenv is not cached: %s names %s" % (sys.argv[1], found),
          file=sys.stderr)
    sys.exit(0)
add("python", "\n".join([sys.version, sys.executable, sys.prefix, sysconfig.get_platform()]
                        + sys.path).encode())
for path in sys.path:
    if os.path.isdir(path):
        names = sorted(n for n in os.listdir(path) if n.endswith((".dist-info", ".egg-info")))
        add("site " + path, "\n".join(names).encode())
for name in sorted(os.environ):
    if name.startswith("PIP_") and name != "PIP_CACHE_DIR":
        add("env " + name, os.environ[name].encode())
print(digest.hexdigest()[:32])
PY
)" || key=""
fi
if [ -n "$key" ] && [ -f "$venv_cache/$key/.ci-runner-complete" ]; then
    rm -rf "$venv"
    ln -s "$venv_cache/$key" "$venv"
    touch "$venv_cache/$key/.ci-runner-complete" 2>/dev/null || true # when it was last used
    ready "requirements from the virtualenv cache ($key)"
    exit 0
fi

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

if [ -n "$key" ]; then
    # Copied under a name of this pod's, then renamed: a pod that looks finds a whole virtualenv
    # or none, and of two pods storing the same key one keeps its copy, the other drops its own.
    # The cache is an optimisation: a claim that is full or read-only fails no job.
    "$python" - "$venv" "$venv_cache" "$key" "${CI_RUNNER_VENV_CACHE_DAYS:-14}" <<'PY' ||
import os
import shutil
import socket
import sys
import time

venv, cache, key, days = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])


def age(path):
    try:
        return time.time() - os.stat(path).st_mtime
    except OSError:
        return None


os.makedirs(cache, exist_ok=True)
for name in os.listdir(cache):
    entry = os.path.join(cache, name)
    # A copy in progress has no marker yet; its directory's time is its last write.
    unused = age(os.path.join(entry, ".ci-runner-complete"))
    if unused is None:
        unused = age(entry)
    if name != key and unused is not None and unused > days * 86400:
        shutil.rmtree(entry, ignore_errors=True)
tmp = os.path.join(cache, ".%s.%s.%d" % (key, socket.gethostname(), os.getpid()))
try:
    shutil.copytree(venv, tmp, symlinks=True)
    open(os.path.join(tmp, ".ci-runner-complete"), "w").close()
    os.rename(tmp, os.path.join(cache, key))
except OSError:
    shutil.rmtree(tmp, ignore_errors=True)
    if not os.path.isdir(os.path.join(cache, key)):  # else another pod stored it first
        raise
PY
        echo "ci-runner: could not keep the virtualenv in $venv_cache (the output is above); the next start installs again" >&2
fi
ready "requirements installed"
