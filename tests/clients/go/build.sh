#!/usr/bin/env bash
# Build the Go test clients (Apache's rocketmq-client-go/v2: rmqgo; nats.go: natspub, the JetStream load
# generator of bench/datapath_bench.py; grpc-go: grpcraw, its raw gRPC load generator) once per source
# version, into the user's cache; print rmqgo's path (natspub and grpcraw are beside it).  A second run with unchanged sources returns at once.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
KEY="$(cat "$HERE"/go.mod "$HERE"/go.sum "$HERE"/rmqgo/*.go "$HERE"/natspub/*.go "$HERE"/grpcraw/*.go "$HERE"/loadstat/*.go | sha1sum | cut -c1-12)"
OUT="${XDG_CACHE_HOME:-$HOME/.cache}/rocketscope/go-clients/$KEY"
GO="$(command -v go || echo /usr/local/go/bin/go)"
if [ ! -x "$OUT/rmqgo" ] || [ ! -x "$OUT/natspub" ] || [ ! -x "$OUT/grpcraw" ]; then
  if [ ! -x "$GO" ]; then
    echo "Go is missing: the Go remoting clients are not built (install Go >= 1.21)" >&2
    exit 3
  fi
  mkdir -p "$OUT"
  echo "building the Go remoting test client (downloads rocketmq-client-go/v2 on first use)..." >&2
  (cd "$HERE" && GOFLAGS="-mod=readonly -buildvcs=false" "$GO" build -o "$OUT/rmqgo.tmp" ./rmqgo >&2)
  (cd "$HERE" && GOFLAGS="-mod=readonly -buildvcs=false" "$GO" build -o "$OUT/natspub.tmp" ./natspub >&2)
  (cd "$HERE" && GOFLAGS="-mod=readonly -buildvcs=false" "$GO" build -o "$OUT/grpcraw.tmp" ./grpcraw >&2)
  mv "$OUT/rmqgo.tmp" "$OUT/rmqgo"
  mv "$OUT/natspub.tmp" "$OUT/natspub"
  mv "$OUT/grpcraw.tmp" "$OUT/grpcraw"
fi
echo "$OUT/rmqgo"
