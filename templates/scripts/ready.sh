#!/bin/sh
# Worker readinessProbe: ready only once the code and requirements of commit $CI_RUNNER_SHA are in
# place (the ready file install-requirements.sh writes last) and sshd listens, so the launcher
# (created on WaitForWorkersReady) never starts horovodrun against a worker still setting up.
ready_file="${CI_RUNNER_READY_FILE:-/ci-runner/ready}"
port="${CI_RUNNER_SSH_PORT:-22}"

[ -f "$ready_file" ] || exit 1
[ "$(cat "$ready_file")" = "${CI_RUNNER_SHA:-}" ] || exit 1

# A listening TCP socket (state 0A) on the port, as the kernel lists it; no ss/netstat needed.
hex_port="$(printf '%04X' "$port")"
listening() {
    for table in /proc/net/tcp /proc/net/tcp6; do
        [ -r "$table" ] || continue
        grep -Eq "^ *[0-9]+: [0-9A-F]+:$hex_port [0-9A-F]+:[0-9A-F]+ 0A " "$table" && return 0
    done
    return 1
}

# The first probe can come as the container starts, before sshd has bound its port; a failed probe
# waits a whole period for the next. Up to 2 s here (within timeoutSeconds) saves that wait.
tries=0
until listening; do
    tries=$((tries + 1))
    [ "$tries" -le 20 ] || exit 1
    sleep 0.1
done
