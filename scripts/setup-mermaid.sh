#!/usr/bin/env bash
# Installs what the chart tests and `make screenshots` draw with: Debian's headless Chromium and
# Mermaid's browser bundle (dist/mermaid.min.js from the npm package) for each version the tests
# name (testing/mermaid/browser.py: what GitLab ships and the newest 11.x). Idempotent: a second run
# checks and returns at once. Nothing goes into the repository: the bundles are kept in the same
# cache as the Horovod wheel; the tests load them from there, with no network.
#
# Usage: scripts/setup-mermaid.sh [VENV]        (VENV defaults to .venv)
# Cache: <cache>/mermaid/<version>/mermaid.min.js
#        <cache>: ci-runner's cache, as scripts/lib/cache.sh finds it
set -euo pipefail

VENV="${1:-.venv}"
PY="$VENV/bin/python"
# shellcheck source=scripts/lib/cache.sh
. "$(dirname "$0")/lib/cache.sh"
CACHE_DIR="$(ci_runner_cache_dir)"

say() { echo "[setup-mermaid] $*"; }
fail() { echo "[setup-mermaid] error: $*" >&2; exit 1; }

if ! command -v chromium >/dev/null 2>&1; then
    [ "$(id -u)" = 0 ] || fail "chromium is missing: install Debian's chromium package (as root: apt-get install chromium)"
    say "installing Debian's chromium ..."
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium fonts-dejavu-core
fi
command -v npm >/dev/null 2>&1 || fail "npm is missing: install Node.js and npm (Debian: apt-get install npm)"

versions=$("$PY" -m testing.mermaid.browser)
for version in $versions; do
    target="$CACHE_DIR/mermaid/$version/mermaid.min.js"
    [ -s "$target" ] && continue
    say "mermaid $version from npm ..."
    work=$(mktemp -d)
    (cd "$work" && npm pack --silent "mermaid@$version" >/dev/null)
    tar -xzf "$work/mermaid-$version.tgz" -C "$work" package/dist/mermaid.min.js
    mkdir -p "$(dirname "$target")"
    mv "$work/package/dist/mermaid.min.js" "$target.partial"
    mv "$target.partial" "$target"
    rm -rf "$work"
done
"$PY" -m testing.mermaid.browser --check
