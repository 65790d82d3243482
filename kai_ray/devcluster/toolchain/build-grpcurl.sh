#!/usr/bin/env bash
# Build grpcurl from its published Go module into the binary cache (OUTSIDE the repository),
# once; later runs reuse it. Prints the bin dir on stdout (last line); progress goes to stderr.
#
# Why: the gRPC API's tests (tests/rpc) must be exercised by a client no one here wrote, one
# that knows the API only through server reflection. grpcurl is that client, but no package
# registry reached here ships its binary and a release tarball is exactly what the tests must
# not depend on; the Go module proxy serves github.com/fullstorydev/grpcurl.
#
# Reproducible path: the wrapper module kai_ray/devcluster/toolchain/grpcurl pins every
# dependency (go.mod + go.sum with a `tool` line); we only `go build -mod=readonly` there.
# grpcurl's go.mod has no replace directives, so the wrapper resolves exactly the versions
# upstream built with. The one link flag is upstream's release flag: the version that
# `grpcurl -version` prints (otherwise "dev build <no version set>").
#
# Usage:
#   kai_ray/devcluster/toolchain/build-grpcurl.sh                  # build when missing, print the bin dir
#   kai_ray/devcluster/toolchain/build-grpcurl.sh --update-modules # regenerate the committed wrapper
#                                                                  # go.mod/go.sum for GRPCURL_VERSION
# Environment:
#   GRPCURL_VERSION (1.9.4)
#   K8S_BIN_CACHE ($HOME/.cache/kai-ray/k8s-test-bin, shared with build-bins.sh)
# When GRPCURL_VERSION differs from the committed pin, a throw-away wrapper is generated in the
# cache's work dir instead of using the committed one.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PROG=build-grpcurl
# shellcheck source=lib.sh
. "$HERE/lib.sh"
GRPCURL_VERSION=${GRPCURL_VERSION:-1.9.4}
CACHE=${K8S_BIN_CACHE:-${HOME}/.cache/kai-ray/k8s-test-bin}
BIN=$CACHE/grpcurl-$GRPCURL_VERSION
WORK=$CACHE/work
MODULE=github.com/fullstorydev/grpcurl
PACKAGE=github.com/fullstorydev/grpcurl/cmd/grpcurl
# Upstream's release binaries are static builds too; no C toolchain needed.
export CGO_ENABLED=0

need_go() {
  command -v go >/dev/null || die "the Go toolchain is required to build grpcurl (https://go.dev/dl/)"
}

if [ "${1:-}" = "--update-modules" ]; then
  need_go
  log "regenerating $HERE/grpcurl for $MODULE v$GRPCURL_VERSION"
  regen_tool_mod "$HERE/grpcurl" kai-ray/toolchain/grpcurl "$MODULE" "$GRPCURL_VERSION" "$PACKAGE"
  exit 0
fi

mkdir -p "$BIN" "$WORK"
lock_cache "$CACHE"

if [ ! -x "$BIN/grpcurl" ]; then
  need_go
  d=$HERE/grpcurl
  if ! pinned "$d" "$MODULE" "$GRPCURL_VERSION"; then
    d=$WORK/grpcurl-$GRPCURL_VERSION
    log "$MODULE v$GRPCURL_VERSION is not the committed pin: generating a wrapper module in $d"
    regen_tool_mod "$d" kai-ray/toolchain/grpcurl "$MODULE" "$GRPCURL_VERSION" "$PACKAGE" \
      || die "could not pin $MODULE v$GRPCURL_VERSION through the Go module proxy (go's errors are above)"
  fi
  # Upstream's .goreleaser.yml: `-X main.version=v{{.Version}}` (plus -s -w).
  ldflags="-s -w -X main.version=v$GRPCURL_VERSION"
  log "building grpcurl v$GRPCURL_VERSION (cold: about 2 min and ~0.5 GB RAM on 2 cores)"
  (cd "$d" && timed grpcurl go build -mod=readonly -trimpath -ldflags "$ldflags" -o "$BIN/grpcurl.tmp" "$PACKAGE") \
    || die "grpcurl v$GRPCURL_VERSION did not build from $d (go's errors are above)"
  mv "$BIN/grpcurl.tmp" "$BIN/grpcurl"
fi

echo "$BIN"
