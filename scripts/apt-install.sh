#!/usr/bin/env bash
# Installs Debian's packages that are missing, as root, without starting any service they bring; a
# second run checks and returns at once. The set-up scripts and make targets call it with their list.
#
# Usage: scripts/apt-install.sh NAME PACKAGE... (NAME prefixes what it prints)
set -euo pipefail

name="$1"
shift
say() { echo "[$name] $*"; }

# Installed, not merely known: `dpkg -s` also succeeds for a removed package whose configuration
# files are left ("deinstall ok config-files").
installed() { [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" = "install ok installed" ]; }

missing=()
for package in "$@"; do
    installed "$package" || missing+=("$package")
done
[ "${#missing[@]}" = 0 ] && exit 0

if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "[$name] error: missing ${missing[*]}: install them as root" \
        "(e.g. sudo apt-get install ${missing[*]})" >&2
    exit 1
fi

# Packages must not start services on this machine (openssh-server would start sshd on port 22):
# invoke-rc.d asks policy-rc.d, as in image builds. Only a policy-rc.d we created is removed.
created_policy=""
if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod 755 /usr/sbin/policy-rc.d
    created_policy=1
fi
cleanup() { [ -z "$created_policy" ] || rm -f /usr/sbin/policy-rc.d; }
trap cleanup EXIT

say "installing ${missing[*]} with apt-get"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
say "done"
