#!/bin/sh
# A torchrun node's entry point (distributed: torchrun): the main container of every pod of the
# Indexed Job runs its arguments, python -m torch.distributed.run --nnodes N ... -- <command>,
# from the checkout its init containers made, with this node's rank ($JOB_COMPLETION_INDEX, which
# the Job controller sets) and node 0's address put before torchrun's options. Node 0 is pod
# <job>-0 in the job's headless Service of the same name: <job>-0.<job>.<namespace>.svc.
set -eu

fail() {
    printf 'ci-runner: %s\n' "$*" >&2
    exit 1
}

code_dir="${CI_RUNNER_CODE_DIR:-/ci-runner/code}"
venv="${CI_RUNNER_VENV:-/ci-runner/venv}"
# The checkout's detached HEAD, read without git: train.yaml's image needs none.
head="$(cat "$code_dir/.git/HEAD" 2>/dev/null)" || head=""
[ "$head" = "${CI_RUNNER_SHA:-}" ] ||
    fail "$code_dir is not at commit ${CI_RUNNER_SHA:-}; fix: the fetch-code init container must run first"

job="${CI_RUNNER_JOB:-}"
namespace="${POD_NAMESPACE:-}"
index="${JOB_COMPLETION_INDEX:-}"
if [ -z "$job" ] || [ -z "$namespace" ]; then
    fail "CI_RUNNER_JOB and POD_NAMESPACE must be set; fix: render the job with ci-runner"
fi
case "$index" in
    '' | *[!0-9]*) fail "JOB_COMPLETION_INDEX '$index' is not a node's index; fix: run it in an Indexed Job (completionMode: Indexed)" ;;
esac
master="$job-0.$job.$namespace.svc"

# The pods run as a user of ci-runner's (nobody unless train.yaml's run_as_user), whose home may
# not exist or be writable: the ranks' caches (~/.cache) go to one on the pod's volume.
if [ -z "${HOME:-}" ] || [ ! -d "$HOME" ] || [ ! -w "$HOME" ]; then
    HOME="${CI_RUNNER_HOME:-/ci-runner/home}"
    mkdir -p "$HOME"
    export HOME
fi

# The ranks run the requirements' virtualenv (install-requirements.sh made it), torchrun too: it
# gives them its environment.
PATH="$venv/bin:$PATH"
export PATH

# The node's options go before torchrun's first one (--nnodes ...), never among the command's
# words after its "--".
count=$#
added=""
while [ "$count" -gt 0 ]; do
    if [ -z "$added" ]; then
        case "$1" in
            --*)
                set -- "$@" --node-rank "$index" --master-addr "$master"
                added=1
                ;;
        esac
    fi
    set -- "$@" "$1"
    shift
    count=$((count - 1))
done
[ -n "$added" ] || fail "no torchrun options in '$*'; fix: render the job with ci-runner"
cd "$code_dir"
exec "$@"
