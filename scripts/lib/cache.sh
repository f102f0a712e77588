# shellcheck shell=sh
# ci-runner's cache on this machine, the rule ci_runner/context.py's cache_dir owns:
# $CI_RUNNER_CACHE, else $XDG_CACHE_HOME/ci-runner, else ~/.cache/ci-runner (an empty variable
# counts as unset). POSIX sh, sourced by scripts/setup-*.sh:
#     . "$(dirname "$0")/lib/cache.sh"
#     CACHE_DIR="$(ci_runner_cache_dir)"

ci_runner_cache_dir() {
    if [ -n "${CI_RUNNER_CACHE:-}" ]; then
        printf '%s\n' "$CI_RUNNER_CACHE"
    elif [ -n "${XDG_CACHE_HOME:-}" ]; then
        printf '%s\n' "$XDG_CACHE_HOME/ci-runner"
    else
        printf '%s\n' "$HOME/.cache/ci-runner"
    fi
}
