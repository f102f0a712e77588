#!/bin/sh
# The launcher's entry point: run its arguments, mpirun ... or, for an elastic job, horovodrun ...
# A fixed-size job's launcher runs no rank and needs no code of its own: mpirun starts each rank in
# the workers' checkout (-wdir), which their install-requirements found at the pinned commit, and
# the launcher pod starts without a fetch-code init container (1-2 s sooner). horovodrun runs
# from the launcher's own checkout, which its fetch-code init container made.
set -eu
code_dir="${CI_RUNNER_CODE_DIR:-/ci-runner/code}"
venv="${CI_RUNNER_VENV:-/ci-runner/venv}"
port="${CI_RUNNER_SSH_PORT:-22}"
if [ "${1:-}" != mpirun ]; then
    # The checkout's detached HEAD, read without git: train.yaml's image needs none.
    head="$(cat "$code_dir/.git/HEAD" 2>/dev/null)" || head=""
    if [ "$head" != "${CI_RUNNER_SHA:-}" ]; then
        printf 'ci-runner: %s is not at commit %s; fix: the fetch-code init container must run first\n' \
            "$code_dir" "${CI_RUNNER_SHA:-}" >&2
        exit 1
    fi
fi

# Every ssh the launcher makes (mpirun's, horovodrun's checks, Gloo's) goes through a wrapper that
# reads a config of ours: the workers' sshd port, no host keys recorded, the job's key (the
# operator's mount at sshAuthMountPath, $CI_RUNNER_SSH_AUTH, is no user's ~/.ssh; ssh ignores a
# key its owner's group or others may read, hence a copy of our own) and, to workers that run
# sshd as root, the user root. The launcher may not write /etc/ssh (it runs as a non-root user).
auth="${CI_RUNNER_SSH_AUTH:-/ci-runner-ssh}"
ssh_dir="${CI_RUNNER_SSH_DIR:-/ci-runner/ssh}"
mkdir -p "$ssh_dir/bin"
{
    printf '%s\n' "Port $port" "StrictHostKeyChecking no" "UserKnownHostsFile /dev/null" "LogLevel ERROR"
    if [ -r "$auth/id_rsa" ]; then
        (umask 077 && cat "$auth/id_rsa" >"$ssh_dir/id")
        printf '%s\n' "IdentityFile $ssh_dir/id" "IdentitiesOnly yes"
    fi
    [ -z "${CI_RUNNER_SSH_USER:-}" ] || printf 'User %s\n' "$CI_RUNNER_SSH_USER"
} >"$ssh_dir/config"
unset CI_RUNNER_SSH_USER # the launcher's, not the ranks'
real_ssh="$(command -v ssh || echo /usr/bin/ssh)"
printf '#!/bin/sh\nexec %s -F %s "$@"\n' "$real_ssh" "$ssh_dir/config" >"$ssh_dir/bin/ssh"
chmod 755 "$ssh_dir/bin/ssh"

# The pods' network is one CNI's, so the launcher's default-route interface is the workers' too.
# horovodrun would otherwise find the interfaces every host shares by starting a task service on
# each worker over ssh (8-9 s before mpirun starts).
iface=""
if [ -r "${CI_RUNNER_ROUTE_TABLE:-/proc/net/route}" ]; then
    while read -r name destination rest; do
        if [ "$destination" = 00000000 ]; then
            iface="$name"
            break
        fi
    done <"${CI_RUNNER_ROUTE_TABLE:-/proc/net/route}"
fi
if [ "${1:-}" = horovodrun ]; then
    PATH="$ssh_dir/bin:$PATH" # horovodrun and Gloo run "ssh"
    if [ -n "$iface" ]; then
        shift
        set -- horovodrun --network-interfaces "$iface" "$@"
    fi
fi

# The ranks run the requirements' virtualenv (install-requirements.sh made it on every worker):
# mpirun (or horovodrun) gives them the launcher's PATH.
PATH="$venv/bin:$PATH"
export PATH

# mpirun (a fixed-size job) gets what horovodrun would add (runner/mpi_run.py): the interface for
# MPI's TCP and NCCL, and -x NAME for each exported variable but those horovodrun leaves out
# (common/util/env.py), so that every rank sees the launcher's environment (a rank on a worker
# never sees the worker container's). Names only: mpirun reads the values, none is on a command
# line. They go before mpirun's other options, which end at the job's command. PWD is not the
# ranks' (orted sets it to -wdir).
if [ "${1:-}" = mpirun ]; then
    shift
    # The launcher pod starts as soon as every worker is Ready, and the cluster's DNS may serve the
    # job Service's records of them a moment later: ssh would fail with "Could not resolve
    # hostname", and mpirun with it. Wait for each name in the hostfile (getent: the pod's resolver).
    hostfile=""
    previous=""
    for arg in "$@"; do
        [ "$arg" != -- ] || break # the job's command follows: its words are not mpirun's
        case "$previous" in -hostfile | --hostfile | -machinefile | --machinefile) hostfile="$arg" ;; esac
        previous="$arg"
    done
    if [ -n "$hostfile" ] && [ -r "$hostfile" ] && command -v getent >/dev/null 2>&1; then
        wait="${CI_RUNNER_DNS_WAIT:-60}"
        polls=0
        while read -r host _; do
            case "$host" in '' | '#'*) continue ;; esac
            until getent hosts "$host" >/dev/null 2>&1; do
                polls=$((polls + 1))
                if [ "$polls" -gt $((wait * 10)) ]; then
                    printf 'ci-runner: worker %s does not resolve after %ss (%s); fix: check the cluster DNS for the job'"'"'s Service, and kubernetes.dns_config in train.yaml\n' \
                        "$host" "$wait" "$hostfile" >&2
                    exit 1
                fi
                sleep 0.1
            done
        done <"$hostfile"
    fi
    count=$#
    set -- "$@" -wdir "$code_dir"
    if [ -n "$iface" ]; then
        set -- "$@" -mca btl_tcp_if_include "$iface" -x "NCCL_SOCKET_IFNAME=$iface"
    fi
    names="$(awk 'BEGIN {
        for (name in ENVIRON)
            if (name !~ /^(BASH_FUNC_|OLDPWD|PWD$|HOROVOD_SECRET_KEY)/ && name !~ /CUDA_VISIBLE_DEVICES/)
                print name
    }' | LC_ALL=C sort)"
    set -f # one word a line, no globbing
    old_ifs="$IFS"
    IFS="
"
    for name in $names; do
        set -- "$@" -x "$name"
    done
    IFS="$old_ifs"
    set +f
    while [ "$count" -gt 0 ]; do # the rendered options and the command after the added ones
        set -- "$@" "$1"
        shift
        count=$((count - 1))
    done
    set -- mpirun "$@"
    # mpirun starts its daemons with the first "ssh" on its PATH (plm_rsh_agent "ssh : rsh"); an
    # MCA parameter naming the wrapper would reach the workers' daemons too, where it is not. The
    # ranks get this PATH too: the wrapper's directory exists in the launcher only.
    PATH="$ssh_dir/bin:$PATH"
    # mpirun's ssh launcher takes the local shell from the user's passwd entry, then $SHELL:
    # nobody's is nologin, and every log would begin "WARNING: local probe returned unhandled
    # shell:unknown assuming bash" (OpenMPI 4.1, plm_rsh_module.c). mpirun's alone: the -x list
    # above is made, so no rank gets it.
    if [ -z "${SHELL:-}" ]; then
        set -- env SHELL=/bin/sh "$@"
    fi
else
    cd "$code_dir"
fi
exec "$@"
