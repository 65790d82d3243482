#!/usr/bin/env bash
# Build helm from its published Go module into the same cache as kube-apiserver (OUTSIDE the
# repository), once; later runs reuse it. Prints the bin dir on stdout (last line); progress
# goes to stderr.
#
# Why: kai-ray ships a Helm chart (charts/kai-ray) and its tests lint it, render it against
# golden files and install, upgrade and uninstall it on the dev cluster (tests/helm). No
# package registry reached here ships the helm binary, and downloading a release tarball is
# exactly what the tests must not depend on; the Go module proxy serves helm.sh/helm/v3.
#
# Reproducible path: the wrapper module kai_ray/devcluster/toolchain/helm pins every dependency
# (go.mod + go.sum with a `tool` line); we only `go build -mod=readonly` there. helm's go.mod
# has no replace directives, so the wrapper resolves exactly the versions upstream built with.
# The link flags are upstream's Makefile's: the version `helm version` prints, and the
# Kubernetes version (client-go's minor + 1.x) that `helm template`/`helm lint` assume when
# they do not talk to a cluster.
#
# Usage:
#   kai_ray/devcluster/toolchain/build-helm.sh                  # build when missing, print the bin dir
#   kai_ray/devcluster/toolchain/build-helm.sh --update-modules # regenerate the committed wrapper
#                                                               # go.mod/go.sum for HELM_VERSION
# Environment:
#   HELM_VERSION (3.22.0)
#   K8S_BIN_CACHE ($HOME/.cache/kai-ray/k8s-test-bin, shared with build-bins.sh)
# When HELM_VERSION differs from the committed pin, a throw-away wrapper is generated in the
# cache's work dir instead of using the committed one.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PROG=build-helm
# shellcheck source=lib.sh
. "$HERE/lib.sh"
HELM_VERSION=${HELM_VERSION:-3.22.0}
CACHE=${K8S_BIN_CACHE:-${HOME}/.cache/kai-ray/k8s-test-bin}
BIN=$CACHE/helm-$HELM_VERSION
WORK=$CACHE/work
MODULE=helm.sh/helm/v3
PACKAGE=helm.sh/helm/v3/cmd/helm
# Upstream's release binaries are static builds too; no C toolchain needed.
export CGO_ENABLED=0

need_go() {
  command -v go >/dev/null || die "the Go toolchain is required to build helm (https://go.dev/dl/)"
}

if [ "${1:-}" = "--update-modules" ]; then
  need_go
  log "regenerating $HERE/helm for $MODULE v$HELM_VERSION"
  regen_tool_mod "$HERE/helm" kai-ray/toolchain/helm "$MODULE" "$HELM_VERSION" "$PACKAGE"
  exit 0
fi

mkdir -p "$BIN" "$WORK"
lock_cache "$CACHE"

if [ ! -x "$BIN/helm" ]; then
  need_go
  d=$HERE/helm
  if ! pinned "$d" "$MODULE" "$HELM_VERSION"; then
    d=$WORK/helm-$HELM_VERSION
    log "$MODULE v$HELM_VERSION is not the committed pin: generating a wrapper module in $d"
    regen_tool_mod "$d" kai-ray/toolchain/helm "$MODULE" "$HELM_VERSION" "$PACKAGE" \
      || die "could not pin $MODULE v$HELM_VERSION through the Go module proxy (go's errors are above)"
  fi
  # Upstream's Makefile: the Kubernetes version assumed without a cluster is client-go's
  # v0.<minor> as 1.<minor>; the git commit comes from the module proxy's record of the tag.
  client_go=$(cd "$d" && go list -mod=readonly -m -f '{{.Version}}' k8s.io/client-go)
  k8s_minor=$(echo "$client_go" | cut -d. -f2)
  commit=$(cd "$d" && go mod download -json "$MODULE@v$HELM_VERSION" | sed -n 's/^[[:space:]]*"Hash": "\([0-9a-f]*\)".*/\1/p' | head -n1)
  ldflags="-s -w -X $MODULE/internal/version.version=v$HELM_VERSION"
  ldflags+=" -X $MODULE/internal/version.gitCommit=$commit -X $MODULE/internal/version.gitTreeState=clean"
  for pkg in pkg/lint/rules pkg/chartutil; do
    ldflags+=" -X $MODULE/$pkg.k8sVersionMajor=1 -X $MODULE/$pkg.k8sVersionMinor=$k8s_minor"
  done
  log "building helm v$HELM_VERSION (cold: about 3 min and ~1.3 GB RAM on 2 cores)"
  (cd "$d" && timed helm go build -mod=readonly -trimpath -ldflags "$ldflags" -o "$BIN/helm.tmp" "$PACKAGE") \
    || die "helm v$HELM_VERSION did not build from $d (go's errors are above)"
  mv "$BIN/helm.tmp" "$BIN/helm"
fi

echo "$BIN"
