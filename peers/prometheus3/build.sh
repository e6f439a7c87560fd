#!/usr/bin/env bash
# Builds Prometheus 3 (for its OTLP receiver, --web.enable-otlp-receiver) from Go modules into
# the user's cache directory:
#
#   ${XDG_CACHE_HOME:-~/.cache}/rocketscope/prometheus3/<key>/prometheus
#
# Why a wrapper module: `go install github.com/prometheus/prometheus/cmd/prometheus@v0.3xx` is
# refused while Prometheus' go.mod has replace/exclude directives, but a dependency's
# replace/exclude lines are ignored, so a tiny module that requires Prometheus as a tool builds
# it. Prometheus 3.M.P is module version v0.3MM.P (the module path has no /v3).
# Build tags: netgo (no cgo), remove_all_sd (only file and HTTP service discovery: much less to
# compile). There is no web UI (it needs an npm build); the HTTP API, /metrics, /-/ready and the
# OTLP receiver all work.
#
# Idempotent: a cached binary that answers `--version` is reused. Concurrent runs share a lock.
#   peers/prometheus3/build.sh          build if needed, then print the binary's path
#   peers/prometheus3/build.sh --path   print the path only
set -euo pipefail

version="${PROMETHEUS3_VERSION:-3.16.0}"
IFS=. read -r major minor patch <<<"$version"
module_version="v0.$((major * 100 + minor)).$patch"
recipe=1   # bump when a change of this script must rebuild the binary
key="$(echo "prometheus $version $recipe" | sha1sum | cut -c1-12)"
root="${XDG_CACHE_HOME:-$HOME/.cache}/rocketscope/prometheus3"
dest="$root/$key"
bin="$dest/prometheus"

if [ "${1:-}" = "--path" ]; then
  echo "$bin"
  exit 0
fi

say() { echo "[prometheus3 $(date -u +%H:%M:%S)] $*" >&2; }

if [ -x "$bin" ] && "$bin" --version >/dev/null 2>&1; then
  say "cached: $bin"
  echo "$bin"
  exit 0
fi
if ! command -v go >/dev/null 2>&1; then
  say "go is not installed: cannot build Prometheus 3 (install Go 1.25+ and re-run)"
  exit 1
fi

mkdir -p "$root"
exec 9>"$root/.lock"
if ! flock -n 9; then
  say "another build holds $root/.lock; waiting for it"
  flock 9
fi
if [ -x "$bin" ] && "$bin" --version >/dev/null 2>&1; then
  say "cached: $bin"
  echo "$bin"
  exit 0
fi

start=$(date +%s)
work="$root/build-$key.$$"
rm -rf "$work"
mkdir -p "$work"
# downloads and the compile step print nothing for minutes: say every 30 s that we are alive
( while sleep 30; do say "... still building, $(( $(date +%s) - start )) s so far"; done ) &
heartbeat=$!
# `|| true`: the heartbeat is gone by the time the script ends, and under `set -e` the failed kill
# made the script exit 1 after a good build (make then printed "the build failed")
trap 'kill $heartbeat 2>/dev/null || true; rm -rf "$work"' EXIT
cd "$work"
say "1/2 resolving github.com/prometheus/prometheus@$module_version (Prometheus $version) and downloading modules"
go mod init local.rocketscope/prometheus3 >/dev/null 2>&1
nice -n "${NICE:-10}" go get -tool "github.com/prometheus/prometheus/cmd/prometheus@$module_version"
say "2/2 compiling (several minutes on two cores)"
CGO_ENABLED=0 nice -n "${NICE:-10}" go build -trimpath -tags netgo,remove_all_sd \
  -ldflags "-s -w -X github.com/prometheus/common/version.Version=$version" \
  -o "$work/prometheus" github.com/prometheus/prometheus/cmd/prometheus
kill $heartbeat 2>/dev/null
mkdir -p "$dest"
mv "$work/prometheus" "$bin"
say "built in $(( $(date +%s) - start )) s: $bin ($(du -h "$bin" | cut -f1))"
for old in "$root"/*/; do
  [ "${old%/}" = "$dest" ] || rm -rf "$old"
done
echo "$bin"
