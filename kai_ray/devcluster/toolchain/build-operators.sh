#!/usr/bin/env bash
# Build KubeRay's ray-operator and the Kubeflow training-operator from their published Go
# modules into the same cache as kube-apiserver (OUTSIDE the repository), once; later runs
# reuse them. Prints the bin dir on stdout (last line); progress goes to stderr.
#
# Why: the workload integrations (../shared/spec/integrations.md §2, §3) depend on what these
# operators really do to the pods they create (KubeRay's kai-scheduler batch plugin sets the
# scheduler name and copies the queue label; the training-operator labels every replica), so
# the Kubernetes tests run the real operators against the dev cluster
# (kai_ray/devcluster/operators.py) instead of imitating them.
#
# Reproducible path: the wrapper modules kai_ray/devcluster/toolchain/kuberay and kai_ray/devcluster/toolchain/training-operator pin
# every dependency (go.mod + go.sum with a `tool` line); we only `go build -mod=readonly` there.
# Neither upstream go.mod has replace directives, so a wrapper resolves exactly the versions
# upstream built with.
#
# Usage:
#   kai_ray/devcluster/toolchain/build-operators.sh                  # build what is missing, print the bin dir
#   kai_ray/devcluster/toolchain/build-operators.sh --update-modules # regenerate the committed wrapper go.mod/go.sum
#                                                 # for KUBERAY_VERSION/TRAINING_OPERATOR_VERSION
# Environment:
#   KUBERAY_VERSION (1.5.0)  TRAINING_OPERATOR_VERSION (1.8.1)
#   K8S_BIN_CACHE ($HOME/.cache/kai-ray/k8s-test-bin, shared with build-bins.sh)
# When a version differs from the committed pin, a throw-away wrapper is generated in the
# cache's work dir instead of using the committed one.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PROG=build-operators
# shellcheck source=lib.sh
. "$HERE/lib.sh"
KUBERAY_VERSION=${KUBERAY_VERSION:-1.5.0}
TRAINING_OPERATOR_VERSION=${TRAINING_OPERATOR_VERSION:-1.8.1}
CACHE=${K8S_BIN_CACHE:-${HOME}/.cache/kai-ray/k8s-test-bin}
BIN=$CACHE/operators-kuberay-$KUBERAY_VERSION-training-operator-$TRAINING_OPERATOR_VERSION
WORK=$CACHE/work
# Upstream's release images are static builds too; no C toolchain needed.
export CGO_ENABLED=0

# One line per operator: binary name, wrapper dir (under this directory), module, version, main package.
OPERATORS=(
  "ray-operator kuberay github.com/ray-project/kuberay/ray-operator $KUBERAY_VERSION github.com/ray-project/kuberay/ray-operator"
  "training-operator training-operator github.com/kubeflow/training-operator $TRAINING_OPERATOR_VERSION github.com/kubeflow/training-operator/cmd/training-operator.v1"
)

need_go() {
  command -v go >/dev/null || die "the Go toolchain is required to build the operators (https://go.dev/dl/)"
}

if [ "${1:-}" = "--update-modules" ]; then
  need_go
  for row in "${OPERATORS[@]}"; do
    read -r _ dir module version package <<<"$row"
    log "regenerating $HERE/$dir for $module v$version"
    regen_tool_mod "$HERE/$dir" "kai-ray/toolchain/$dir" "$module" "$version" "$package"
  done
  exit 0
fi

mkdir -p "$BIN" "$WORK"
lock_cache "$CACHE"

for row in "${OPERATORS[@]}"; do
  read -r bin dir module version package <<<"$row"
  [ -x "$BIN/$bin" ] && continue
  need_go
  d=$HERE/$dir
  if ! pinned "$d" "$module" "$version"; then
    d=$WORK/$dir-$version
    log "$module v$version is not the committed pin: generating a wrapper module in $d"
    regen_tool_mod "$d" "kai-ray/toolchain/$dir" "$module" "$version" "$package" \
      || die "could not pin $module v$version through the Go module proxy (go's errors are above)"
  fi
  log "building $bin v$version (cold: 2-3 min and ~0.8 GB RAM on 2 cores)"
  (cd "$d" && timed "$bin" go build -mod=readonly -trimpath -ldflags "-s -w" -o "$BIN/$bin.tmp" "$package") \
    || die "$bin v$version did not build from $d (go's errors are above)"
  mv "$BIN/$bin.tmp" "$BIN/$bin"
done

echo "$BIN"
