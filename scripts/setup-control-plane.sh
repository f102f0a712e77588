#!/usr/bin/env bash
# Builds the real control plane and node programs of the emulated cluster: kube-apiserver,
# kube-controller-manager, kube-scheduler and the kubelet (k8s.io/kubernetes), etcd
# (go.etcd.io/etcd/server/v3), the MPI Operator (github.com/kubeflow/mpi-operator) and CoreDNS
# (github.com/coredns/coredns), each from the Go module pinned under testing/control_plane/modules/
# (go.mod and go.sum; the binaries are their `tool` lines).
#
# The binaries are built once into a cache directory outside the repository, keyed by those go.mod
# and go.sum files: a warm machine returns in a second. Cold on 2 cores this takes 15-30 minutes
# and up to about 6 GB of memory (the figures of each build are printed).
#
# Usage: scripts/setup-control-plane.sh            builds what is missing, prints the bin directory
#        scripts/setup-control-plane.sh --bin-dir  prints the bin directory; exit 1 if not built
# Cache: <cache>/control-plane/<key>/bin
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
    "kubernetes:kube-scheduler:k8s.io/kubernetes/cmd/kube-scheduler"
    "kubernetes:kube-controller-manager:k8s.io/kubernetes/cmd/kube-controller-manager"
    "kubernetes:kube-apiserver:k8s.io/kubernetes/cmd/kube-apiserver"
    "kubernetes:kubectl:k8s.io/kubernetes/cmd/kubectl"
    "kubernetes:kubelet:k8s.io/kubernetes/cmd/kubelet"
    "coredns:coredns:github.com/coredns/coredns"
)

key=$(cd "$MODULES" && cat ./*/go.mod ./*/go.sum | sha256sum | cut -c1-16)
BIN_DIR="$CACHE_DIR/control-plane/$key/bin"

built() {
    local entry
    for entry in "${BINARIES[@]}"; do
        name="${entry#*:}"
        [ -x "$BIN_DIR/${name%%:*}" ] || return 1
    done
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

command -v go >/dev/null || fail "go is not installed: install Go 1.$GO_MIN_MINOR or later (https://go.dev/dl/)"
go_minor=$(go env GOVERSION | sed -E 's/^go1\.([0-9]+).*/\1/')
[ "$go_minor" -ge "$GO_MIN_MINOR" ] 2>/dev/null \
    || fail "$(go env GOVERSION) is too old: install Go 1.$GO_MIN_MINOR or later"

k8s_version=$(cd "$MODULES/kubernetes" && go list -m -f '{{.Version}}' k8s.io/kubernetes) \
    || fail "cannot read k8s.io/kubernetes's version from $MODULES/kubernetes/go.mod"
k8s_minor=$(echo "$k8s_version" | cut -d. -f2)
# kube-apiserver reports this at /version (otherwise v0.0.0-master, which clients distrust).
K8S_LDFLAGS="-s -w -X k8s.io/component-base/version.gitVersion=$k8s_version"
K8S_LDFLAGS+=" -X k8s.io/component-base/version.gitMajor=1"
K8S_LDFLAGS+=" -X k8s.io/component-base/version.gitMinor=$k8s_minor"
K8S_LDFLAGS+=" -X k8s.io/component-base/version.gitTreeState=clean"

tmp="$BIN_DIR.tmp.$$"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp"
start=$SECONDS
for entry in "${BINARIES[@]}"; do
    IFS=: read -r module name package <<<"$entry"
    ldflags="-s -w"
    [ "$module" = kubernetes ] && ldflags="$K8S_LDFLAGS"
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
    say "$name: built in $((SECONDS - step_start))s$memory"
done
mkdir -p "$(dirname "$BIN_DIR")"
rm -rf "$BIN_DIR"
mv "$tmp" "$BIN_DIR"
rm -f "$BIN_DIR"/*.time
trap - EXIT
say "built in $((SECONDS - start))s into $BIN_DIR"
echo "$BIN_DIR"
