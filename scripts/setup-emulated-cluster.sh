#!/usr/bin/env bash
# Installs the host tools the emulated cluster (testing/emulated_cluster) uses, when they are
# missing: iproute2 (its bridge), util-linux (mount, for its state tmpfs) and the OpenSSH client
# (ssh-keygen and ssh for the tests that log into worker pods). What its nodes run is
# scripts/setup-real-node.sh's. Debian/Ubuntu, as root; a second run checks and returns at once.
#
# Usage: scripts/setup-emulated-cluster.sh
set -euo pipefail
exec "$(dirname "$0")/apt-install.sh" setup-emulated-cluster iproute2 util-linux openssh-client
