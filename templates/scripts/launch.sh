#!/bin/sh
# The launcher's entry point: run its arguments (horovodrun ...) from the code of the pinned commit,
# which the launcher's fetch-code init container checked out.
set -eu
code_dir="${CI_RUNNER_CODE_DIR:-/ci-runner/code}"
venv="${CI_RUNNER_VENV:-/ci-runner/venv}"
port="${CI_RUNNER_SSH_PORT:-22}"
head="$(git -C "$code_dir" rev-parse HEAD 2>/dev/null)" || head=""
if [ "$head" != "${CI_RUNNER_SHA:-}" ]; then
    printf 'ci-runner: %s is not at commit %s; fix: the fetch-code init container must run first\n' \
        "$code_dir" "${CI_RUNNER_SHA:-}" >&2
    exit 1
fi

# Every ssh the launcher makes (horovodrun's checks, mpirun's, Gloo's) goes to the workers' sshd
# port and records no host keys: ~/.ssh is the operator's read-only key mount, where ssh would
# complain once per host. The first value ssh reads wins, so these lines go first.
config="${CI_RUNNER_SSH_CONFIG:-/etc/ssh/ssh_config}"
if { [ ! -e "$config" ] || [ -w "$config" ]; } && [ -w "$(dirname "$config")" ]; then
    {
        printf '%s\n' "# ci-runner: the workers' sshd; ~/.ssh is read-only" "Port $port" \
            "StrictHostKeyChecking no" "UserKnownHostsFile /dev/null" "LogLevel ERROR"
        cat "$config" 2>/dev/null || true
    } >"$config.ci-runner"
    mv "$config.ci-runner" "$config"
elif [ "$port" != 22 ]; then
    printf 'ci-runner: cannot write %s to reach the workers on port %s; fix: run the launcher as root, or use an image whose sshd listens on 22\n' \
        "$config" "$port" >&2
    exit 1
fi

# horovodrun looks for the network interfaces every host shares by starting a task service on
# each worker over ssh (8-9 s before mpirun starts). The pods' network is one CNI's, so the
# launcher's default-route interface is the workers' too: naming it skips that discovery (mpirun
# then gets -mca btl_tcp_if_include and NCCL_SOCKET_IFNAME for it, as discovery would give).
iface=""
if [ "${1:-}" = horovodrun ] && [ -r "${CI_RUNNER_ROUTE_TABLE:-/proc/net/route}" ]; then
    while read -r name destination rest; do
        if [ "$destination" = 00000000 ]; then
            iface="$name"
            break
        fi
    done <"${CI_RUNNER_ROUTE_TABLE:-/proc/net/route}"
fi
if [ -n "$iface" ]; then
    shift
    set -- horovodrun --network-interfaces "$iface" "$@"
fi

# The ranks run the requirements' virtualenv (install-requirements.sh made it on every worker):
# horovodrun gives them the launcher's PATH.
PATH="$venv/bin:$PATH"
export PATH
cd "$code_dir"
exec "$@"
