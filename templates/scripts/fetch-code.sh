#!/bin/sh
# Fetch exactly commit $CI_RUNNER_SHA of $CI_RUNNER_REPO_URL into $CI_RUNNER_CODE_DIR.
# Runs in an init container of every MPIJob pod. Credentials (GIT_USERNAME / GIT_PASSWORD, from
# a Secret) reach git through a credential helper that reads the environment: the token is never
# in a URL, a command-line argument or the log.
set -eu

fail() {
    printf 'ci-runner: %s\n' "$*" >&2
    exit 1
}

repo_url="${CI_RUNNER_REPO_URL:-}"
sha="${CI_RUNNER_SHA:-}"
code_dir="${CI_RUNNER_CODE_DIR:-/ci-runner/code}"
[ -n "$repo_url" ] || fail "CI_RUNNER_REPO_URL is not set; fix: render the job with ci-runner"
case "$sha" in
    '' | *[!0-9a-f]*) fail "CI_RUNNER_SHA '$sha' is not a full commit SHA; fix: render the job with ci-runner" ;;
esac
[ "${#sha}" -eq 40 ] || [ "${#sha}" -eq 64 ] ||
    fail "CI_RUNNER_SHA '$sha' is not a full commit SHA; fix: render the job with ci-runner"

export GIT_TERMINAL_PROMPT=0
rm -rf "$code_dir"
mkdir -p "$code_dir"
cd "$code_dir"
git init --quiet .
git remote add origin "$repo_url"
if [ -n "${GIT_PASSWORD:-}" ]; then
    # shellcheck disable=SC2016 # expanded by the shell git runs the helper in, not here
    git config credential.helper \
        '!f() { test "$1" = get || exit 0; printf "username=%s\npassword=%s\n" "${GIT_USERNAME:-gitlab-ci-token}" "$GIT_PASSWORD"; }; f'
fi

log="$(mktemp)"
if ! git fetch --quiet --no-tags --depth 1 origin "$sha" 2>"$log"; then
    detail="$(grep -v '^[[:space:]]*$' "$log" | tail -n 1)"
    rm -f "$log"
    fail "cannot fetch commit $sha from $repo_url ($detail); fix: push the commit, and check that the CI job token (or CI_RUNNER_GIT_TOKEN) can read the repository"
fi
rm -f "$log"
git -c advice.detachedHead=false checkout --quiet FETCH_HEAD
head="$(git rev-parse HEAD)"
[ "$head" = "$sha" ] || fail "fetched commit $head instead of $sha from $repo_url; fix: check CI_RUNNER_REPO_URL"
echo "ci-runner: code at commit $sha in $code_dir"
