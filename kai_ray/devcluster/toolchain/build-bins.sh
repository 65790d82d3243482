#!/usr/bin/env bash
# Build kube-apiserver, kube-controller-manager, kubectl, etcd and (optionally) kwok from their
# published Go modules into a cache directory OUTSIDE the repository, once; later runs reuse it.
# Prints the bin dir on stdout (last line); progress goes to stderr.
#
# Why: kai-ray's Kubernetes tests run against a real kube-apiserver + etcd on loopback and no
# package registry ships those binaries. See ../shared/design/real-apiserver.md. kubectl comes
# from the same k8s.io/kubernetes module (the apiserver wrapper's second `tool` line): the test
# that runs docs/install.md word for word needs one, and a fresh machine may have none.
# kube-controller-manager too (the third `tool` line): devcluster runs a few of its controllers
# (Deployment, ReplicaSet, Job, garbage collector, PV binder, ...) so workloads get pods as on
# a real cluster; see control_plane.py for which ones and why.
#
# Reproducible path: the wrapper modules kai_ray/devcluster/toolchain/apiserver and kai_ray/devcluster/toolchain/etcd pin every
# dependency (go.mod + go.sum with a `tool` line); we only `go build -mod=readonly` there.
# `go install k8s.io/kubernetes/cmd/kube-apiserver@vX` is refused (its go.mod has replace
# directives for the staging modules), hence the wrappers, which replace each k8s.io staging
# module by its published v0.X.Y version.
#
# Usage:
#   kai_ray/devcluster/toolchain/build-bins.sh                  # build what is missing, print the bin dir
#   kai_ray/devcluster/toolchain/build-bins.sh --update-modules # regenerate the committed wrapper go.mod/go.sum
#                                            # for K8S_VERSION/ETCD_VERSION (version bumps)
# Environment:
#   K8S_VERSION (1.36.3)  ETCD_VERSION (3.6.14)  KWOK_VERSION (0.8.0, "none" to skip kwok)
#   K8S_BIN_CACHE ($HOME/.cache/kai-ray/k8s-test-bin)
# When K8S_VERSION/ETCD_VERSION differ from the committed pins, a throw-away wrapper is
# generated in the cache's work dir instead of using the committed one.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PROG=build-bins
# shellcheck source=lib.sh
. "$HERE/lib.sh"
K8S_VERSION=${K8S_VERSION:-1.36.3}
ETCD_VERSION=${ETCD_VERSION:-3.6.14}
KWOK_VERSION=${KWOK_VERSION:-0.8.0}
CACHE=${K8S_BIN_CACHE:-${HOME}/.cache/kai-ray/k8s-test-bin}
BIN=$CACHE/k8s-$K8S_VERSION-etcd-$ETCD_VERSION-kwok-$KWOK_VERSION
WORK=$CACHE/work
# Official kube-apiserver/etcd release builds are static too; no C toolchain needed.
export CGO_ENABLED=0

command -v go >/dev/null || die "the Go toolchain is required (https://go.dev/dl/)"

# kube-apiserver's module: k8s.io/kubernetes vX with every staging module (k8s.io/api,
# k8s.io/apiserver, ...) replaced by its published v0.<minor>.<patch> tag.
regen_apiserver_mod() {  # DIR
  local d=$1 kmod m staging=v0.${K8S_VERSION#1.}
  mkdir -p "$d"; rm -f "$d/go.mod" "$d/go.sum"
  (
    cd "$d"
    go mod init kai-ray/toolchain/apiserver >/dev/null 2>&1
    go mod download k8s.io/kubernetes@v"$K8S_VERSION"
    kmod=$(go env GOMODCACHE)/k8s.io/kubernetes@v$K8S_VERSION/go.mod
    go mod edit -go="$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$kmod")"
    # The staging list comes from the module's own go.mod ("k8s.io/x => ./staging/src/k8s.io/x").
    for m in $(sed -n 's#^[[:space:]]*\(k8s\.io/[^[:space:]]*\)[[:space:]]*=>[[:space:]]*\./staging/.*#\1#p' "$kmod"); do
      go mod edit -replace="$m=$m@$staging"
    done
    go get -tool k8s.io/kubernetes/cmd/kube-apiserver@v"$K8S_VERSION"
    go get -tool k8s.io/kubernetes/cmd/kubectl@v"$K8S_VERSION"
    go get -tool k8s.io/kubernetes/cmd/kube-controller-manager@v"$K8S_VERSION"
    go mod tidy   # keeps go.mod (the tool line pins it); completes go.sum so tidy is a no-op later
  )
}

# etcd's module root package is the etcd main; its go.mod has replaces (../api, ...) too.
regen_etcd_mod() {  # DIR
  regen_tool_mod "$1" kai-ray/toolchain/etcd go.etcd.io/etcd/server/v3 "$ETCD_VERSION" go.etcd.io/etcd/server/v3
}

if [ "${1:-}" = "--update-modules" ]; then
  log "regenerating $HERE/apiserver for k8s.io/kubernetes v$K8S_VERSION"
  regen_apiserver_mod "$HERE/apiserver"
  log "regenerating $HERE/etcd for go.etcd.io/etcd/server/v3 v$ETCD_VERSION"
  regen_etcd_mod "$HERE/etcd"
  exit 0
fi

mkdir -p "$BIN" "$WORK"
lock_cache "$CACHE"

# Each binary is checked on its own: a cache dir made before kube-controller-manager joined the
# list gets just that one built.
if [ ! -x "$BIN/kube-apiserver" ] || [ ! -x "$BIN/kubectl" ] || [ ! -x "$BIN/kube-controller-manager" ]; then
  d=$HERE/apiserver
  if ! pinned "$d" k8s.io/kubernetes "$K8S_VERSION"; then
    d=$WORK/apiserver-$K8S_VERSION
    log "K8S_VERSION=$K8S_VERSION is not the committed pin: generating a wrapper module in $d"
    regen_apiserver_mod "$d"
  fi
  minor=$(echo "$K8S_VERSION" | cut -d. -f2)
  ld="-s -w"
  # Without these /version reports v0.0.0-master (the server still runs).
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld="$ld -X $p.gitVersion=v$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
  done
  if [ ! -x "$BIN/kube-apiserver" ]; then
    log "building kube-apiserver v$K8S_VERSION (cold: ~7 min and ~2 GB RAM on 2 cores)"
    (cd "$d" && timed kube-apiserver go build -mod=readonly -trimpath -tags=notest,grpcnotrace \
        -ldflags "$ld" -o "$BIN/kube-apiserver.tmp" k8s.io/kubernetes/cmd/kube-apiserver)
    mv "$BIN/kube-apiserver.tmp" "$BIN/kube-apiserver"
  fi
  if [ ! -x "$BIN/kubectl" ]; then
    # Shares most packages with kube-apiserver: ~3 min more on 2 cores after it.
    log "building kubectl v$K8S_VERSION"
    (cd "$d" && timed kubectl go build -mod=readonly -trimpath -ldflags "$ld" \
        -o "$BIN/kubectl.tmp" k8s.io/kubernetes/cmd/kubectl)
    mv "$BIN/kubectl.tmp" "$BIN/kubectl"
  fi
  if [ ! -x "$BIN/kube-controller-manager" ]; then
    # Shares the apiserver's and client-go's packages; its own are the controllers and the
    # volume plugins they import: ~1 min more on 2 cores after kubectl (measured 47 s, ~1.9 GB
    # peak RSS, the link).
    log "building kube-controller-manager v$K8S_VERSION"
    (cd "$d" && timed kube-controller-manager go build -mod=readonly -trimpath -tags=notest,grpcnotrace \
        -ldflags "$ld" -o "$BIN/kube-controller-manager.tmp" k8s.io/kubernetes/cmd/kube-controller-manager)
    mv "$BIN/kube-controller-manager.tmp" "$BIN/kube-controller-manager"
  fi
fi

if [ ! -x "$BIN/etcd" ]; then
  d=$HERE/etcd
  if ! pinned "$d" go.etcd.io/etcd/server/v3 "$ETCD_VERSION"; then
    d=$WORK/etcd-$ETCD_VERSION
    log "ETCD_VERSION=$ETCD_VERSION is not the committed pin: generating a wrapper module in $d"
    regen_etcd_mod "$d"
  fi
  log "building etcd v$ETCD_VERSION"
  (cd "$d" && timed etcd go build -mod=readonly -trimpath -ldflags "-s -w" \
      -o "$BIN/etcd.tmp" go.etcd.io/etcd/server/v3)
  mv "$BIN/etcd.tmp" "$BIN/etcd"
fi

# kwok is optional: without it devcluster falls back to its Python fake kubelet. A failed
# build is remembered (kwok.failed) so every test run does not pay for retrying it; delete
# that file to retry.
if [ "$KWOK_VERSION" != none ] && [ ! -x "$BIN/kwok" ] && [ ! -e "$BIN/kwok.failed" ]; then
  log "building kwok v$KWOK_VERSION"
  # kwok's go.mod has no replace directives, so plain `go install` works (its documented route).
  if (cd "$WORK" && GOBIN=$WORK/kwok-$KWOK_VERSION timed kwok go install -trimpath -ldflags "-s -w" \
        sigs.k8s.io/kwok/cmd/kwok@v"$KWOK_VERSION") 2>"$WORK/kwok-build.log"; then
    grep '^build-bins:' "$WORK/kwok-build.log" >&2 || true
    mv "$WORK/kwok-$KWOK_VERSION/kwok" "$BIN/kwok"
  else
    cat "$WORK/kwok-build.log" >&2
    mv "$WORK/kwok-build.log" "$BIN/kwok.failed"
    log "kwok failed to build; devcluster will use its fake kubelet"
  fi
fi
if [ -x "$BIN/kwok" ] && [ ! -s "$BIN/kwok-stages.yaml" ]; then
  # kwok v0.8.0 has no built-in default stages: feed it the upstream "fast" stages straight
  # from the module cache (nothing to commit).
  st=$(go env GOMODCACHE)/sigs.k8s.io/kwok@v$KWOK_VERSION/kustomize/stage
  for f in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
           pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
    echo '---'; cat "$st/$f"
  done >"$BIN/kwok-stages.yaml.tmp"
  mv "$BIN/kwok-stages.yaml.tmp" "$BIN/kwok-stages.yaml"
fi

echo "$BIN"
