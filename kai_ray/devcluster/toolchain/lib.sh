# Helpers shared by build-bins.sh and build-operators.sh; sourced, never run on its own.
# The sourcing script sets PROG (its log prefix) and runs under `set -euo pipefail`.

log() { echo "$PROG: $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

lock_cache() {  # CACHE: hold CACHE/.lock on fd 9 until the script exits
  # One lock for every build into the cache: two test runs starting at once would otherwise
  # build twice and race, and two Go builds side by side do not fit 2 cores well anyway.
  exec 9>"$1/.lock"
  flock 9
}

timed() {  # NAME CMD... : run CMD, log wall time and peak RSS of the biggest process
  local name=$1 t0 t1 rc=0; shift
  t0=$(date +%s)
  if [ -x /usr/bin/time ]; then
    /usr/bin/time -f "$PROG: $name peak RSS %M KiB" "$@" || rc=$?
  else
    "$@" || rc=$?
  fi
  t1=$(date +%s)
  log "$name took $((t1 - t0))s (exit $rc)"
  return $rc
}

pinned() {  # MODDIR MODULE VERSION -> true when the committed wrapper pins MODULE at VERSION
  [ -f "$1/go.mod" ] && [ -f "$1/go.sum" ] && grep -Eq "^[[:space:]]*$2 v$3( |$)" "$1/go.mod"
}

# A wrapper module whose `tool` line pins PACKAGE of MODULE@vVERSION.  MODULE's own replace
# directives do not apply in it (only a main module's do): fine when they point at sibling
# modules published under the same tag (etcd) or when there are none (the operators);
# kube-apiserver needs its staging replaces restated (build-bins.sh's regen_apiserver_mod).
regen_tool_mod() {  # DIR WRAPPER_MODULE_NAME MODULE VERSION PACKAGE
  # Chained with && so the status is right also where the caller's `set -e` is suspended
  # (`regen_tool_mod ... || die ...`).
  local d=$1 name=$2 module=$3 version=$4 package=$5
  mkdir -p "$d" && rm -f "$d/go.mod" "$d/go.sum" && (
    cd "$d" &&
      go mod init "$name" >/dev/null 2>&1 &&
      go get -tool "$package@v$version" &&
      # The module's own go line (go mod init wrote the local toolchain's): the binary then
      # gets the GODEBUG defaults upstream's build has, and older Go toolchains can build it.
      go mod edit -go="$(go list -m -f '{{.GoVersion}}' "$module")" &&
      go mod tidy   # completes go.sum so `go build -mod=readonly` needs nothing more
  )
}
