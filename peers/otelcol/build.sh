#!/usr/bin/env bash
# Builds RocketScope's OpenTelemetry Collector from Go modules with the OpenTelemetry Collector
# Builder (ocb), from peers/otelcol/manifest.yaml, into the user's cache directory:
#
#   ${XDG_CACHE_HOME:-~/.cache}/rocketscope/otelcol/<manifest hash>/otelcol-rocketscope
#
# Idempotent: when that binary exists (and answers `--version`) the script only prints its path.
# Go downloads go to Go's own module cache (`go env GOMODCACHE`), so a rebuild after a manifest
# change downloads only what changed. Concurrent runs wait on a lock instead of building twice.
#
#   peers/otelcol/build.sh           build if needed, print progress, then the binary's path
#   peers/otelcol/build.sh --path    print the path the binary has (built or not), build nothing
#
# Needs `go` (1.25+) and the Go module proxy. The Go build runs under `nice` (NICE, default 10)
# because it takes every core it can get.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
manifest="$here/manifest.yaml"
builder_version="v0.155.0"
name="otelcol-rocketscope"
recipe=1   # bump when a change of this script must rebuild the binary
# the key covers the manifest and the recipe, so a manifest change rebuilds
key="$( (cat "$manifest"; echo "$builder_version $recipe") | sha1sum | cut -c1-12)"
root="${XDG_CACHE_HOME:-$HOME/.cache}/rocketscope/otelcol"
dest="$root/$key"
bin="$dest/$name"

if [ "${1:-}" = "--path" ]; then
  echo "$bin"
  exit 0
fi

say() { echo "[otelcol $(date -u +%H:%M:%S)] $*" >&2; }

if [ -x "$bin" ] && "$bin" --version >/dev/null 2>&1; then
  say "cached: $bin"
  echo "$bin"
  exit 0
fi

if ! command -v go >/dev/null 2>&1; then
  say "go is not installed: cannot build the collector (install Go 1.25+ and re-run)"
  exit 1
fi

mkdir -p "$root"
exec 9>"$root/.lock"
if ! flock -n 9; then
  say "another build holds $root/.lock; waiting for it"
  flock 9
fi
if [ -x "$bin" ] && "$bin" --version >/dev/null 2>&1; then   # built while we waited
  say "cached: $bin"
  echo "$bin"
  exit 0
fi

start=$(date +%s)
work="$root/build-$key.$$"
rm -rf "$work"
mkdir -p "$work/tools"
# downloads and the compile step print nothing for minutes: say every 30 s that we are alive
( while sleep 30; do say "... still building, $(( $(date +%s) - start )) s so far"; done ) &
heartbeat=$!
# `|| true`: the heartbeat is gone by the time the script ends, and under `set -e` the failed kill
# made the script exit 1 after a good build (make then printed "the build failed")
trap 'kill $heartbeat 2>/dev/null || true; rm -rf "$work"' EXIT

say "1/2 installing the builder (ocb) $builder_version with $(go version | cut -d' ' -f3)"
GOBIN="$work/tools" nice -n "${NICE:-10}" go install "go.opentelemetry.io/collector/cmd/builder@$builder_version"

# output_path goes into a copy of the manifest: the builder resolves it against its working dir
sed "s|^dist:\$|dist:\n  output_path: $work/src|" "$manifest" > "$work/manifest.yaml"

say "2/2 the builder generates the sources, downloads the modules (~1.8 GB into an empty module cache)" \
  "and compiles (minutes on two cores); it logs each step below"
(cd "$work" && nice -n "${NICE:-10}" "$work/tools/builder" --config="$work/manifest.yaml")
kill $heartbeat 2>/dev/null

mkdir -p "$dest"
mv "$work/src/$name" "$bin.tmp" && mv "$bin.tmp" "$bin"
cp "$manifest" "$dest/manifest.yaml"
say "built in $(( $(date +%s) - start )) s: $bin ($(du -h "$bin" | cut -f1))"
# older builds of other manifests are dead weight
for old in "$root"/*/; do
  [ "${old%/}" = "$dest" ] || rm -rf "$old"
done
echo "$bin"
