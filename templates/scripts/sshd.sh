#!/bin/sh
# The workers' main process: the image's sshd in the foreground on $CI_RUNNER_SSH_PORT, which the
# launcher reaches over ssh. The operator mounts the job's ssh keys at sshAuthMountPath
# ($CI_RUNNER_SSH_AUTH, no user's ~/.ssh), a tmpfs whose root has mode 1777, so sshd reads
# authorized_keys there and its StrictModes check (on in the stock images) is off.
set -eu
port="${CI_RUNNER_SSH_PORT:-22}"
auth="${CI_RUNNER_SSH_AUTH:-/ci-runner-ssh}"
sshd="$(command -v sshd || echo /usr/sbin/sshd)"
[ -x "$sshd" ] || {
    printf 'ci-runner: the image has no sshd; fix: use an image with OpenSSH server (e.g. horovod/horovod or one built on mpioperator/base)\n' >&2
    exit 1
}
set -- -De -p "$port" -o StrictModes=no -o "AuthorizedKeysFile=$auth/authorized_keys"
if [ "$(id -u)" = 0 ]; then
    # /run/sshd is the privilege separation directory, which not every image creates.
    mkdir -p /run/sshd
else
    # As the image's user (kubernetes.run_as_user), the way MPI Operator's base images run it
    # (build/base/Dockerfile, sshd_config): the job's key is the host key (the image's are
    # root's), the pid file is ours, and no PAM. PAM's account check runs pam_unix's setgid
    # helper to read /etc/shadow, which allowPrivilegeEscalation false keeps from gaining its
    # group: "Access denied for user ... by PAM account configuration". Without PAM, sshd (no
    # capability, not in group shadow) cannot read /etc/shadow either, so it takes no account
    # for locked.
    dir="${CI_RUNNER_SSHD_DIR:-/ci-runner/sshd}"
    mkdir -p "$dir"
    (umask 077 && cat "$auth/id_rsa" >"$dir/host_key")
    set -- "$@" -o UsePAM=no -o "HostKey=$dir/host_key" -o "PidFile=$dir/sshd.pid"
fi
echo "ci-runner: starting sshd on port $port"
exec "$sshd" "$@"
