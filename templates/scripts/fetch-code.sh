#!/bin/sh
# Fetch exactly commit $CI_RUNNER_SHA of $CI_RUNNER_REPO_URL into $CI_RUNNER_CODE_DIR.
# Runs in an init container of every worker pod (and of an elastic job's launcher).
#
# The git credential is two files in $CI_RUNNER_GIT_CREDENTIALS, username and password: the job
# Secret's git keys, mounted in this container only. git gets them from a credential helper given
# on the fetch's command line, which reads the files when git asks: the token is never in a
# variable, a URL, an argument, the log, the checkout's .git/config or /ci-runner, which every
# rank reads. git runs with an environment of this script's (env -i): no GIT_* variable but its
# own, no system or global configuration, so nothing else configures it (core.fsmonitor,
# credential helpers, GIT_SSH_COMMAND...). Proxy settings the image has are kept.
set -eu

fail() {
    printf 'ci-runner: %s\n' "$*" >&2
    exit 1
}

repo_url="${CI_RUNNER_REPO_URL:-}"
sha="${CI_RUNNER_SHA:-}"
code_dir="${CI_RUNNER_CODE_DIR:-/ci-runner/code}"
credentials="${CI_RUNNER_GIT_CREDENTIALS:-}"
[ -n "$repo_url" ] || fail "CI_RUNNER_REPO_URL is not set; fix: render the job with ci-runner"
case "$sha" in
    '' | *[!0-9a-f]*) fail "CI_RUNNER_SHA '$sha' is not a full commit SHA; fix: render the job with ci-runner" ;;
esac
[ "${#sha}" -eq 40 ] || [ "${#sha}" -eq 64 ] ||
    fail "CI_RUNNER_SHA '$sha' is not a full commit SHA; fix: render the job with ci-runner"

# GIT_CONFIG_NOSYSTEM, and an empty HOME for a git older than GIT_CONFIG_GLOBAL (2.32): no
# /etc/gitconfig, ~/.gitconfig or ~/.config/git/config.
home="$(mktemp -d)"
trap 'rm -rf "$home"' EXIT
git_() {
    env -i PATH="$PATH" HOME="$home" GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null \
        GIT_TERMINAL_PROMPT=0 CI_RUNNER_GIT_CREDENTIALS="$credentials" \
        ${http_proxy+"http_proxy=$http_proxy"} ${https_proxy+"https_proxy=$https_proxy"} \
        ${no_proxy+"no_proxy=$no_proxy"} ${HTTP_PROXY+"HTTP_PROXY=$HTTP_PROXY"} \
        ${HTTPS_PROXY+"HTTPS_PROXY=$HTTPS_PROXY"} ${NO_PROXY+"NO_PROXY=$NO_PROXY"} git "$@"
}

rm -rf "$code_dir"
mkdir -p "$code_dir"
cd "$code_dir"
git_ init --quiet .
git_ remote add origin "$repo_url"
# The helper is the fetch's alone: it is not written into .git/config, so no later git in the
# checkout (a rank's) finds a way to the files, which are not there anyway.
helper=""
if [ -n "$credentials" ] && [ -s "$credentials/password" ]; then
    # shellcheck disable=SC2016 # expanded by the shell git runs the helper in, not here
    helper='!f() { test "$1" = get || exit 0; user="$(cat "$CI_RUNNER_GIT_CREDENTIALS/username")"; printf "username=%s\npassword=%s\n" "${user:-gitlab-ci-token}" "$(cat "$CI_RUNNER_GIT_CREDENTIALS/password")"; }; f'
fi

log="$(mktemp)"
if ! git_ -c credential.helper="$helper" fetch --quiet --no-tags --depth 1 origin "$sha" 2>"$log"; then
    detail="$(grep -v '^[[:space:]]*$' "$log" | tail -n 1)"
    rm -f "$log"
    fail "cannot fetch commit $sha from $repo_url ($detail); fix: push the commit, and check that the CI job token (or CI_RUNNER_GIT_TOKEN) can read the repository"
fi
rm -f "$log"
git_ -c advice.detachedHead=false checkout --quiet FETCH_HEAD
head="$(git_ rev-parse HEAD)"
[ "$head" = "$sha" ] || fail "fetched commit $head instead of $sha from $repo_url; fix: check CI_RUNNER_REPO_URL"
echo "ci-runner: code at commit $sha in $code_dir"

# The setup image's uv, if it has one, for install-requirements (uv_install.py), which runs it in
# train.yaml's image with that image's rights: it gains nothing there it did not have. Without it,
# pip installs.
uv_to="${CI_RUNNER_UV-/ci-runner/tools/uv}"
if [ -n "$uv_to" ] && uv="$(command -v uv)"; then
    { mkdir -p "$(dirname "$uv_to")" && cp "$uv" "$uv_to.tmp" && mv "$uv_to.tmp" "$uv_to"; } ||
        echo "ci-runner: could not copy $uv to $uv_to; pip installs the requirements" >&2
fi
