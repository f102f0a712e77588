#!/usr/bin/env bash
# Installs what the emulated cluster's real nodes run besides the kubelet (which
# scripts/setup-control-plane.sh builds): Debian's containerd, runc and CNI plugins, busybox-static
# for the small test image, gcc and libc6-dev for the static pause binary, debootstrap for the
# images built from Debian's packages (testing/emulated_cluster/nodeimages.py). apt-get only: no CPU to
# speak of, so .ci/run runs it while the Go programs build.
set -euo pipefail
exec "$(dirname "$0")/apt-install.sh" setup-real-node \
    containerd runc containernetworking-plugins busybox-static gcc libc6-dev debootstrap
