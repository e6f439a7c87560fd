#!/usr/bin/env bash
# Build the Go test clients (Apache's rocketmq-client-go/v2: rmqgo; nats.go: natspub, the JetStream load
# generator of bench/datapath_bench.py; grpc-go: grpcraw, its raw gRPC load generator; remotingraw and natsraw,
# its raw remoting and NATS load generators, no library but the standard one) once per source version, into the
# user's cache; print rmqgo's path (the others are beside it).  A second run with unchanged sources returns at once.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
KEY="$(cat "$HERE"/go.mod "$HERE"/go.sum "$HERE"/rmqgo/*.go "$HERE"/natspub/*.go "$HERE"/grpcraw/*.go "$HERE"/loadstat/*.go "$HERE"/rawpipe/*.go "$HERE"/remotingraw/*.go "$HERE"/natsraw/*.go | sha1sum | cut -c1-12)"
OUT="${XDG_CACHE_HOME:-$HOME/.cache}/rocketscope/go-clients/$KEY"
GO="$(command -v go || echo /usr/local/go/bin/go)"
PROGRAMS="rmqgo natspub grpcraw remotingraw natsraw"
missing=""
for p in $PROGRAMS; do [ -x "$OUT/$p" ] || missing=1; done
if [ -n "$missing" ]; then
  if [ ! -x "$GO" ]; then
    echo "Go is missing: the Go remoting clients are not built (install Go >= 1.21)" >&2
    exit 3
  fi
  mkdir -p "$OUT"
  echo "building the Go remoting test client (downloads rocketmq-client-go/v2 on first use)..." >&2
  for p in $PROGRAMS; do
    (cd "$HERE" && GOFLAGS="-mod=readonly -buildvcs=false" "$GO" build -o "$OUT/$p.tmp" "./$p" >&2)
  done
  for p in $PROGRAMS; do mv "$OUT/$p.tmp" "$OUT/$p"; done
fi
echo "$OUT/rmqgo"
