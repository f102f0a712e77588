#!/usr/bin/env bash
# Installs the system tools the emulated cluster (testing/emulated_cluster) runs pods with, when they
# are missing: dnsmasq (cluster DNS), OpenSSH server and client (sshd in worker pods, ssh from the
# launcher), iproute2 (bridge, veths, network namespaces), util-linux (nsenter, unshare) and
# OpenMPI (mpirun). Debian/Ubuntu, as root; a second run checks and returns at once.
#
# Usage: scripts/setup-emulated-cluster.sh
set -euo pipefail
exec "$(dirname "$0")/apt-install.sh" setup-emulated-cluster \
    dnsmasq-base openssh-server openssh-client iproute2 util-linux openmpi-bin
