#!/bin/sh
# The workers' main process: the image's sshd in the foreground on $CI_RUNNER_SSH_PORT, which the
# launcher's horovodrun reaches over ssh. The operator mounts the ssh keys from a Secret, a tmpfs
# whose root has mode 1777, so sshd's StrictModes check (on in the stock images) would refuse the
# key: it is off here. /run/sshd is sshd's privilege separation directory, which not every image
# creates.
set -eu
port="${CI_RUNNER_SSH_PORT:-22}"
mkdir -p /run/sshd
sshd="$(command -v sshd || echo /usr/sbin/sshd)"
[ -x "$sshd" ] || {
    printf 'ci-runner: the image has no sshd; fix: use an image with OpenSSH server (e.g. horovod/horovod or one built on mpioperator/base)\n' >&2
    exit 1
}
echo "ci-runner: starting sshd on port $port"
exec "$sshd" -De -o StrictModes=no -p "$port"
