#!/usr/bin/env bash
# Builds the real control plane and node programs of the emulated cluster: kube-apiserver,
# kube-controller-manager, kube-scheduler and the kubelet (k8s.io/kubernetes), etcd
# (go.etcd.io/etcd/server/v3), the MPI Operator (github.com/kubeflow/mpi-operator), Kueue
# (sigs.k8s.io/kueue, with the manifests it needs copied out of its module: its CRDs, webhook
# configurations and ClusterRoles) and CoreDNS (github.com/coredns/coredns), each from the Go
# module pinned under testing/control_plane/modules/ (go.mod and go.sum; the binaries are their
# `tool` lines).
#
# Each module is built once into a cache directory of its own outside the repository, keyed by
# that module's go.mod and go.sum: a change to one module rebuilds only its binaries. The bin
# directory the tests use is then put together from them (hard links, renamed into place): a warm
# machine returns in a second. Cold on 2 cores this takes 15-30 minutes and up to about 6 GB of
# memory (the figures of each build are printed).
#
# Usage: scripts/setup-control-plane.sh            builds what is missing, prints the bin directory
#        scripts/setup-control-plane.sh --bin-dir  prints the bin directory; exit 1 if not built
# Cache: <cache>/control-plane/modules/<module>-<module key>/   one module's binaries (and files)
#        <cache>/control-plane/<key>/bin                         all of them, hard links
#        <cache>: ci-runner's cache, as scripts/lib/cache.sh finds it
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
MODULES="$ROOT/testing/control_plane/modules"
GO_MIN_MINOR=26
# shellcheck source=scripts/lib/cache.sh
. "$(dirname "$0")/lib/cache.sh"
CACHE_DIR="$(ci_runner_cache_dir)"

say() { echo "[setup-control-plane] $*" >&2; }
fail() { echo "[setup-control-plane] error: $*" >&2; exit 1; }

# module directory:binary:package (a tool line of that module), smallest first so a failure shows early.
BINARIES=(
    "etcd:etcd:go.etcd.io/etcd/server/v3"
    "mpi-operator:mpi-operator:github.com/kubeflow/mpi-operator/cmd/mpi-operator"
    "kueue:kueue:sigs.k8s.io/kueue/cmd/kueue"
    "kubernetes:kube-scheduler:k8s.io/kubernetes/cmd/kube-scheduler"
    "kubernetes:kube-controller-manager:k8s.io/kubernetes/cmd/kube-controller-manager"
    "kubernetes:kube-apiserver:k8s.io/kubernetes/cmd/kube-apiserver"
    "kubernetes:kubectl:k8s.io/kubernetes/cmd/kubectl"
    "kubernetes:kubelet:k8s.io/kubernetes/cmd/kubelet"
    "coredns:coredns:github.com/coredns/coredns"
)

# Files a run reads out of a module besides its binaries (copied into <module dir>/<module>-files,
# so a run needs no Go): module:Go module path:its paths, relative to the module's root.
# Kueue's: its CRDs, the kustomization that says which CRDs get the conversion webhook (and those
# patches), its webhook configurations, the manager's ClusterRole and its Role on secrets in its
# namespace, the ClusterRole its visibility server delegates authentication and authorization
# with, and its licence.
MODULE_FILES=(
    "kueue:sigs.k8s.io/kueue:LICENSE config/components/crd/bases config/components/crd/kustomization.yaml config/components/crd/patches config/components/webhook/manifests.yaml config/components/rbac/role.yaml config/components/rbac/manager_secrets_role.yaml config/components/rbac/metrics_auth_role.yaml"
)

modules() {
    local entry
    for entry in "${BINARIES[@]}"; do echo "${entry%%:*}"; done | awk '!seen[$0]++'
}

binaries_of() {
    local entry module name package
    for entry in "${BINARIES[@]}"; do
        IFS=: read -r module name package <<<"$entry"
        [ "$module" = "$1" ] && echo "$name"
    done
    return 0
}

files_of() {
    local entry
    for entry in "${MODULE_FILES[@]}"; do
        [ "${entry%%:*}" = "$1" ] && echo "${entry#*:}"
    done
    return 0
}

# A module's key: its go.mod and go.sum, and what is copied out of it (a change rebuilds it).
module_key() {
    local files
    files=$(files_of "$1")
    { cat "$MODULES/$1/go.mod" "$MODULES/$1/go.sum"; [ -z "$files" ] || echo "$files"; } \
        | sha256sum | cut -c1-16
}

module_dir() { echo "$CACHE_DIR/control-plane/modules/$1-$(module_key "$1")"; }

# Whether directory $2 holds everything of module $1.
complete() {
    local name
    for name in $(binaries_of "$1"); do
        [ -x "$2/$name" ] || return 1
    done
    [ -z "$(files_of "$1")" ] || [ -d "$2/$1-files" ]
}

key=$(for module in $(modules); do echo "$module $(module_key "$module")"; done \
    | sha256sum | cut -c1-16)
BIN_DIR="$CACHE_DIR/control-plane/$key/bin"

built() {
    local module
    for module in $(modules); do complete "$module" "$BIN_DIR" || return 1; done
}

if [ "${1:-}" = "--bin-dir" ]; then
    built || fail "the control plane is not built for this checkout: run scripts/setup-control-plane.sh"
    echo "$BIN_DIR"
    exit 0
fi
[ $# -eq 0 ] || fail "usage: scripts/setup-control-plane.sh [--bin-dir]"

if built; then
    echo "$BIN_DIR"
    exit 0
fi

check_go() {
    command -v go >/dev/null || fail "go is not installed: install Go 1.$GO_MIN_MINOR or later (https://go.dev/dl/)"
    local go_minor
    go_minor=$(go env GOVERSION | sed -E 's/^go1\.([0-9]+).*/\1/')
    [ "$go_minor" -ge "$GO_MIN_MINOR" ] 2>/dev/null \
        || fail "$(go env GOVERSION) is too old: install Go 1.$GO_MIN_MINOR or later"
}

# kube-apiserver reports these at /version (otherwise v0.0.0-master, which clients distrust).
kubernetes_ldflags() {
    local k8s_version k8s_minor
    k8s_version=$(cd "$MODULES/kubernetes" && go list -m -f '{{.Version}}' k8s.io/kubernetes) \
        || fail "cannot read k8s.io/kubernetes's version from $MODULES/kubernetes/go.mod"
    k8s_minor=$(echo "$k8s_version" | cut -d. -f2)
    echo "-s -w -X k8s.io/component-base/version.gitVersion=$k8s_version" \
        "-X k8s.io/component-base/version.gitMajor=1" \
        "-X k8s.io/component-base/version.gitMinor=$k8s_minor" \
        "-X k8s.io/component-base/version.gitTreeState=clean"
}

# Copies the module's files a run reads into $2/<module>-files (writable, so the cache can go).
copy_files() {
    local module="$1" out="$2" entry gomodule paths source path
    entry=$(files_of "$module")
    [ -n "$entry" ] || return 0
    gomodule="${entry%%:*}"
    paths="${entry#*:}"
    source=$(cd "$MODULES/$module" && GOFLAGS=-mod=readonly go mod download -json "$gomodule" \
        | sed -n -E 's/^\s*"Dir": "(.*)",?$/\1/p') || true
    if [ -z "$source" ] || [ ! -d "$source" ]; then
        fail "cannot find $gomodule's source (go mod download)"
    fi
    for path in $paths; do
        [ -e "$source/$path" ] || fail "$gomodule has no $path"
        mkdir -p "$out/$module-files/$(dirname "$path")"
        cp -R "$source/$path" "$out/$module-files/$path"
    done
    chmod -R u+w "$out/$module-files"
}

build_module() {
    local module="$1" dir="$2" tmp name package entry ldflags step_start memory timer
    tmp="$dir.tmp.$$"
    rm -rf "$tmp"
    mkdir -p "$tmp"
    ldflags="-s -w"
    [ "$module" = kubernetes ] && ldflags="$(kubernetes_ldflags)"
    for entry in "${BINARIES[@]}"; do
        [ "${entry%%:*}" = "$module" ] || continue
        IFS=: read -r _ name package <<<"$entry"
        say "building $name ($package) ..."
        step_start=$SECONDS
        # GNU time, where the machine has it, gives the build's peak memory (the largest process's RSS).
        timer=()
        [ -x /usr/bin/time ] && timer=(/usr/bin/time -f '%M' -o "$tmp/$name.time")
        (cd "$MODULES/$module" && CGO_ENABLED=0 GOFLAGS=-mod=readonly \
            "${timer[@]}" go build -trimpath -ldflags "$ldflags" -o "$tmp/$name" "$package") \
            || fail "building $name failed (see above)"
        memory=""
        [ -f "$tmp/$name.time" ] && memory=", peak memory $(( $(tail -n1 "$tmp/$name.time") / 1024 )) MiB"
        rm -f "$tmp/$name.time"
        say "$name: built in $((SECONDS - step_start))s$memory"
    done
    copy_files "$module" "$tmp"
    rm -rf "$dir"
    mv -T "$tmp" "$dir"
}

cleanup=()
trap 'rm -rf "${cleanup[@]}"' EXIT
start=$SECONDS
go_checked=""
for module in $(modules); do
    dir=$(module_dir "$module")
    complete "$module" "$dir" && continue
    [ -n "$go_checked" ] || { check_go; go_checked=1; }
    cleanup+=("$dir.tmp.$$")
    mkdir -p "$(dirname "$dir")"
    build_module "$module" "$dir"
done

tmp="$BIN_DIR.tmp.$$"
cleanup+=("$tmp")
rm -rf "$tmp"
mkdir -p "$tmp"
for module in $(modules); do
    dir=$(module_dir "$module")
    for name in $(binaries_of "$module"); do
        ln "$dir/$name" "$tmp/$name" 2>/dev/null || cp "$dir/$name" "$tmp/$name"
    done
    if [ -d "$dir/$module-files" ]; then
        cp -al "$dir/$module-files" "$tmp/" 2>/dev/null || cp -R "$dir/$module-files" "$tmp/"
    fi
done
rm -rf "$BIN_DIR"
mv -T "$tmp" "$BIN_DIR"
trap - EXIT
say "ready in $((SECONDS - start))s: $BIN_DIR"
echo "$BIN_DIR"
