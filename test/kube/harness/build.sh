#!/usr/bin/env bash
# Builds the kube-harness binary (kube-apiserver + embedded etcd, test-only) once and caches it.
#
#   bash test/kube/harness/build.sh        # prints the binary's absolute path on stdout
#
# Cache: <repo>/.cache/kube-harness/<key>/kube-harness, where <key> is the sha256 of go.sum,
# go.mod, the harness's Go sources and the Go version (so an edit to main.go or a new Go never
# reuses a stale binary). Override the cache root with KUBE_HARNESS_CACHE.
# Needs only Go (go.mod says 1.26.0; the machine's 1.26.8 does) and the Go module proxy.
# A cold build (empty GOMODCACHE and GOCACHE) downloads ~530 MB of modules, fills ~2.2 GB of Go build
# cache and takes ~8.5 min on 2 cores; with a warm GOCACHE it only links (~20 s).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
cache_root="${KUBE_HARNESS_CACHE:-$root/.cache/kube-harness}"

command -v go >/dev/null 2>&1 || export PATH="$PATH:/usr/local/go/bin"
command -v go >/dev/null 2>&1 || { echo "build.sh: go not found (expected on PATH or in /usr/local/go/bin)" >&2; exit 1; }

cd "$here"
key="$(
  {
    cat go.sum go.mod
    for f in $(find . -maxdepth 1 -name '*.go' | LC_ALL=C sort); do
      printf '\n%s\n' "$f"
      cat "$f"
    done
    go env GOVERSION GOOS GOARCH
  } | sha256sum | cut -c1-64
)"
out_dir="$cache_root/$key"
bin="$out_dir/kube-harness"

if [[ -x "$bin" ]]; then
  echo "$bin"
  exit 0
fi

mkdir -p "$out_dir"
# One build at a time per key (a second caller waits, then reuses the result).
exec 9>"$out_dir/.lock"
if command -v flock >/dev/null 2>&1; then
  flock 9
fi
if [[ -x "$bin" ]]; then
  echo "$bin"
  exit 0
fi

echo "build.sh: building kube-harness (kube-apiserver v1.36.3 + etcd v3.7.1); this takes minutes on a cold cache" >&2
start=$(date +%s)
tmp="$out_dir/kube-harness.tmp.$$"
trap 'rm -f "$tmp"' EXIT
# -buildvcs=false: the binary does not need VCS stamps, and a clone owned by another user would fail them.
# -mod=readonly: go.mod/go.sum are committed and complete; never rewrite them in CI.
export GOFLAGS="${GOFLAGS:-} -mod=readonly -buildvcs=false"
# Stamp the Kubernetes version (a module build leaves /version at "v0.0.0-master").
kver="$(go list -m -f '{{.Version}}' k8s.io/kubernetes)" # e.g. v1.36.3
kminor="${kver#v1.}"
kminor="${kminor%%.*}"
vpkg=k8s.io/component-base/version
go build -trimpath \
  -ldflags="-s -w -X $vpkg.gitVersion=$kver -X $vpkg.gitMajor=1 -X $vpkg.gitMinor=$kminor -X $vpkg.gitTreeState=clean" \
  -o "$tmp" .
mv -f "$tmp" "$bin"
echo "build.sh: built in $(($(date +%s) - start))s, $(du -h "$bin" | cut -f1)" >&2
echo "$bin"
