#!/usr/bin/env bash
# Installs gitlab-ci-local, which tests/test_templates_ci.py runs the CI files with (4.65.1 is the
# last release that runs on Node 20), and rsync, which it copies the checkout with before running
# a job (even with the shell executor). Installed outside the checkout, where the tests look for
# it. Idempotent: a second run checks and returns at once.
#
# Usage: scripts/setup-gitlab-ci-local.sh
# Where: ${XDG_CACHE_HOME:-$HOME/.cache}/ci-runner/npm/node_modules/.bin/gitlab-ci-local
set -euo pipefail

VERSION=4.65.1
PREFIX="${XDG_CACHE_HOME:-$HOME/.cache}/ci-runner/npm"

say() { echo "[setup-gitlab-ci-local] $*"; }
fail() { echo "[setup-gitlab-ci-local] error: $*" >&2; exit 1; }

updated=
apt_install() {
    [ "$(id -u)" = 0 ] || fail "$1 is missing: install Debian's $1 package (as root: apt-get install $*)"
    if [ -z "$updated" ]; then
        apt-get update -qq
        updated=1
    fi
    say "installing $* ..."
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" > /dev/null
}

command -v rsync > /dev/null || apt_install rsync
command -v npm > /dev/null || apt_install nodejs npm
if ! "$PREFIX/node_modules/.bin/gitlab-ci-local" --version 2>/dev/null | grep -qx "$VERSION"; then
    say "gitlab-ci-local $VERSION from npm ..."
    npm install --silent --no-audit --no-fund --prefix "$PREFIX" "gitlab-ci-local@$VERSION"
fi
"$PREFIX/node_modules/.bin/gitlab-ci-local" --version | grep -qx "$VERSION" \
    || fail "gitlab-ci-local $VERSION did not install in $PREFIX"
