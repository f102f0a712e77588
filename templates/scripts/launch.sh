#!/bin/sh
# The launcher's entry point: run its arguments (horovodrun ...) from the code of the pinned commit,
# which the launcher's fetch-code init container checked out.
set -eu
code_dir="${CI_RUNNER_CODE_DIR:-/ci-runner/code}"
head="$(git -C "$code_dir" rev-parse HEAD 2>/dev/null)" || head=""
if [ "$head" != "${CI_RUNNER_SHA:-}" ]; then
    printf 'ci-runner: %s is not at commit %s; fix: the fetch-code init container must run first\n' \
        "$code_dir" "${CI_RUNNER_SHA:-}" >&2
    exit 1
fi
cd "$code_dir"
exec "$@"
