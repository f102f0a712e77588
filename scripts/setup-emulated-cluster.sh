#!/usr/bin/env bash
# Installs the system tools the emulated cluster (testing/emulated_cluster) runs pods with, when they
# are missing: dnsmasq (cluster DNS), OpenSSH server and client (sshd in worker pods, ssh from the
# launcher), iproute2 (bridge, veths, network namespaces), util-linux (nsenter, unshare) and
# OpenMPI (mpirun). Debian/Ubuntu, as root; a second run checks and returns at once.
#
# Usage: scripts/setup-emulated-cluster.sh
set -euo pipefail

PACKAGES=(dnsmasq-base openssh-server openssh-client iproute2 util-linux openmpi-bin)

say() { echo "[setup-emulated-cluster] $*"; }

# Installed, not merely known: `dpkg -s` also succeeds for a removed package whose configuration
# files are left ("deinstall ok config-files").
installed() { [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" = "install ok installed" ]; }

missing=()
for package in "${PACKAGES[@]}"; do
    installed "$package" || missing+=("$package")
done
[ "${#missing[@]}" = 0 ] && exit 0

if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "[setup-emulated-cluster] error: missing ${missing[*]}: install them as root" \
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
