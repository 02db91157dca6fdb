#!/usr/bin/env bash
# Builds the test-only tools of the Kubernetes suite once and caches them:
#   kube-harness  kube-apiserver + embedded etcd (this module's main.go)
#   kubectl       k8s.io/kubernetes/cmd/kubectl, from this module (a `tool` in go.mod: same versions)
#   helm          helm.sh/helm/v3/cmd/helm at HELM_VERSION, from the Go module proxy
#   promtool      github.com/prometheus/prometheus/cmd/promtool at PROMETHEUS_VERSION
#
#   bash test/kube/harness/build.sh              # builds all four; prints "<name> <path>" per tool
#   bash test/kube/harness/build.sh kubectl helm # builds (or finds) only those
#
# Cache: <root>/<name>/<key>/<name>, where <key> is the sha256 of what the binary is built from
# (go.sum, go.mod and the Go sources for the harness and kubectl; the pinned version for helm and
# promtool) and the Go version, so an edit or a new Go never reuses a stale binary. The root is
# KUBE_HARNESS_CACHE (default <repo>/.cache/kube-harness). Needs only Go (go.mod says 1.26.0) and
# the Go module proxy. Cold (empty GOMODCACHE and GOCACHE): ~530 MB of modules and ~8.5 min for the
# harness, then ~1.5 min for kubectl, ~3 min for helm and ~15 min for promtool on 2 cores; with a
# warm Go build cache each is a link (~20-40 s).
# A failed build exits non-zero with Go's error on stderr: the tests that need the tool then fail
# with that message (never a silent skip).
set -euo pipefail

HELM_VERSION=v3.22.0
PROMETHEUS_VERSION=v0.316.0 # Prometheus 3.x's module version

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
cache_root="${KUBE_HARNESS_CACHE:-$root/.cache/kube-harness}"

command -v go >/dev/null 2>&1 || export PATH="$PATH:/usr/local/go/bin"
command -v go >/dev/null 2>&1 || { echo "build.sh: go not found (expected on PATH or in /usr/local/go/bin)" >&2; exit 1; }

cd "$here"
goenv="$(go env GOVERSION GOOS GOARCH)"
# The harness module's inputs (kube-harness and kubectl are both built from them).
module_inputs() {
  cat go.sum go.mod
  for f in $(find . -maxdepth 1 -name '*.go' | LC_ALL=C sort); do
    printf '\n%s\n' "$f"
    cat "$f"
  done
}

# build <name> <key material> <command...>: runs the command (which writes "$tmp") unless cached.
build() {
  local name="$1" material="$2"
  shift 2
  local key out_dir bin start
  key="$(printf '%s\n%s\n%s\n' "$name" "$material" "$goenv" | sha256sum | cut -c1-64)"
  out_dir="$cache_root/$name/$key"
  bin="$out_dir/$name"
  if [[ ! -x "$bin" ]]; then
    mkdir -p "$out_dir"
    # One build at a time per key (a second caller waits, then reuses the result).
    exec 9>"$out_dir/.lock"
    command -v flock >/dev/null 2>&1 && flock 9
    if [[ ! -x "$bin" ]]; then
      echo "build.sh: building $name; this takes minutes on a cold Go cache" >&2
      start=$(date +%s)
      tmp="$out_dir/$name.tmp.$$"
      if ! "$@"; then
        rm -rf "$tmp"
        echo "build.sh: building $name failed (see Go's output above)" >&2
        exit 1
      fi
      mv -f "$tmp" "$bin"
      echo "build.sh: built $name in $(($(date +%s) - start))s, $(du -h "$bin" | cut -f1)" >&2
    fi
    exec 9>&-
  fi
  echo "$name $bin"
}

# -buildvcs=false: no VCS stamps (a clone owned by another user would fail them).
# -mod=readonly: go.mod/go.sum are committed and complete; never rewrite them in CI.
harness_flags="${GOFLAGS:-} -mod=readonly -buildvcs=false"
kver="$(GOFLAGS="$harness_flags" go list -m -f '{{.Version}}' k8s.io/kubernetes)" # e.g. v1.36.3
kminor="${kver#v1.}"
kminor="${kminor%%.*}"
# Stamp the Kubernetes version (a module build leaves it at "v0.0.0-master"): /version of the
# apiserver, `kubectl version`.
vpkg=k8s.io/component-base/version
kube_ldflags="-s -w -X $vpkg.gitVersion=$kver -X $vpkg.gitMajor=1 -X $vpkg.gitMinor=$kminor -X $vpkg.gitTreeState=clean"

build_harness() { GOFLAGS="$harness_flags" go build -trimpath -ldflags="$kube_ldflags" -o "$tmp" .; }
build_kubectl() { GOFLAGS="$harness_flags" go build -trimpath -ldflags="$kube_ldflags" -o "$tmp" k8s.io/kubernetes/cmd/kubectl; }
# `go install pkg@version` builds with the module's own go.mod (neither has replace directives) and
# checks every module against the checksum database.
go_install() {
  local pkg="$1"
  mkdir -p "$tmp"
  # (cd /: no go.mod of ours applies to an install at a version)
  (cd / && GOFLAGS=-buildvcs=false GOBIN="$tmp" go install -trimpath -ldflags="-s -w" "$pkg") || return 1
  local built="$tmp/${pkg##*/}"
  built="${built%@*}"
  mv "$built" "$tmp.bin" && rmdir "$tmp" && mv "$tmp.bin" "$tmp"
}
build_helm() { go_install "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"; }
build_promtool() { go_install "github.com/prometheus/prometheus/cmd/promtool@$PROMETHEUS_VERSION"; }

want=("$@")
[[ ${#want[@]} -gt 0 ]] || want=(kube-harness kubectl helm promtool)
for t in "${want[@]}"; do
  case "$t" in
  kube-harness) build kube-harness "$(module_inputs)" build_harness ;;
  kubectl) build kubectl "$(module_inputs)" build_kubectl ;;
  helm) build helm "$HELM_VERSION" build_helm ;;
  promtool) build promtool "$PROMETHEUS_VERSION" build_promtool ;;
  *)
    echo "build.sh: unknown tool '$t' (kube-harness, kubectl, helm, promtool)" >&2
    exit 2
    ;;
  esac
done
