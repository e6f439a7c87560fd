#!/usr/bin/env bash
# `make peers`: Apache RocketMQ 5.3.3 (name server, broker, proxy, mqadmin) and 5.5.0 (the second reference:
# priority messages and Lite mode; peers/rocketmq-5.5.0/pom.xml), Apache's Java clients
# (remoting rocketmq-client 5.3.3 with its trace hook; gRPC rocketmq-client-java 5.0.8) and the Go
# client (rocketmq-client-go/v2), all from package registries, cached under
# ${XDG_CACHE_HOME:-~/.cache}/rocketscope/peers.  Idempotent: a stamp named after the hash of the
# inputs (poms, go.mod/go.sum, Java sources, this script) makes a second run return at once.
# Layout of the cache (read by peers/reference_cluster.py):
#   m2/                    Maven's local repository (shared by both poms)
#   rocketmq-5.3.3/lib/    server + tools + remoting client jars (the binary release's lib/)
#   rocketmq-5.5.0/lib/    the same for 5.5.0 (`reference_cluster.py --version 5.5.0`)
#   java-clients/lib/      the shaded gRPC client
#   classes/remoting/      RemotingTool (peers/java/src), compiled against rocketmq-5.3.3/lib
#   classes/grpc/          GrpcTool, GrpcLoad and GrpcDiffTool, compiled against java-clients/lib
#   bin/rmqgo              peers/go, built with the Go client
#   gomod/ gobuild/        Go's module and build caches
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/rocketscope/peers"
KEY="$(cat "$HERE"/rocketmq/pom.xml "$HERE"/rocketmq-5.5.0/pom.xml "$HERE"/java-clients/pom.xml "$HERE"/go/go.mod "$HERE"/go/go.sum \
        "$HERE"/go/*.go "$HERE"/java/src/*.java "$HERE"/setup.sh | sha1sum | cut -c1-12)"
STAMP="$CACHE/.ready-$KEY"
START=$(date +%s)

say() { echo "peers [$(( $(date +%s) - START ))s] $*"; }

if [ -f "$STAMP" ]; then
  say "ready in $CACHE (cached)"
  exit 0
fi

# The tools: present on this machine kind; on a fresh Debian machine as root, Java and Maven come
# from Debian. Go must be >= 1.22 (peers/go/go.mod), newer than Debian 12's.
missing=""
command -v java >/dev/null || missing="$missing openjdk-17-jdk-headless"
command -v javac >/dev/null || missing="$missing openjdk-17-jdk-headless"
command -v mvn >/dev/null || missing="$missing maven"
if [ -n "$missing" ]; then
  if [ "$(id -u)" = "0" ]; then
    say "installing Debian packages:$missing"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
  else
    say "not root: Debian packages$missing are missing; the tests that need the peers will say so"
    exit 0
  fi
fi
GO="$(command -v go || echo /usr/local/go/bin/go)"

mkdir -p "$CACHE"
rm -f "$CACHE"/.ready-*
MVN=(mvn -B -q -ntp -Dstyle.color=never "-Dmaven.repo.local=$CACHE/m2")

# A heartbeat while a long step downloads: the size of the caches every 15 s.
tick() {
  while sleep 15; do say "... $1: $(du -sm "$CACHE" 2>/dev/null | cut -f1) MB in the cache so far"; done
}
run_step() {  # run_step NAME COMMAND...
  local name="$1"; shift
  tick "$name" & local ticker=$!
  local rc=0
  "$@" || rc=$?
  kill "$ticker" 2>/dev/null; wait "$ticker" 2>/dev/null || true
  return $rc
}

copy_deps() {  # copy_deps POM_DIR OUT_DIR: resolve into a fresh dir, then swap it in
  rm -rf "$2.tmp"
  (cd "$1" && "${MVN[@]}" dependency:copy-dependencies -DincludeScope=runtime "-DoutputDirectory=$2.tmp")
  rm -rf "$2" && mv "$2.tmp" "$2"
}

say "1/4 Apache RocketMQ 5.3.3 (namesrv, broker, proxy, tools, remoting client) from Maven Central"
run_step "RocketMQ jars" copy_deps "$HERE/rocketmq" "$CACHE/rocketmq-5.3.3/lib"
say "    $(ls "$CACHE/rocketmq-5.3.3/lib" | wc -l) jars"
say "1b/4 Apache RocketMQ 5.5.0, the second reference (priority messages, Lite mode)"
run_step "RocketMQ 5.5.0 jars" copy_deps "$HERE/rocketmq-5.5.0" "$CACHE/rocketmq-5.5.0/lib"
say "    $(ls "$CACHE/rocketmq-5.5.0/lib" | wc -l) jars"

say "2/4 Apache's gRPC Java client rocketmq-client-java 5.0.8"
run_step "gRPC client" copy_deps "$HERE/java-clients" "$CACHE/java-clients/lib"

say "3/4 compiling peers/java/src"
rm -rf "$CACHE/classes" && mkdir -p "$CACHE/classes/remoting" "$CACHE/classes/grpc"
javac -nowarn -d "$CACHE/classes/remoting" -cp "$CACHE/rocketmq-5.3.3/lib/*" "$HERE/java/src/RemotingTool.java"
javac -nowarn -d "$CACHE/classes/grpc" -cp "$CACHE/java-clients/lib/*" "$HERE/java/src/GrpcTool.java" \
  "$HERE/java/src/GrpcLoad.java" "$HERE/java/src/GrpcDiffTool.java"
# GrpcLoad: the gRPC load generator of bench/datapath_bench.py; GrpcDiffTool: tests/test_diff_grpc.py's Java run

say "4/4 Apache's Go client (github.com/apache/rocketmq-client-go/v2) and peers/go"
if [ -x "$GO" ]; then
  mkdir -p "$CACHE/bin"
  (cd "$HERE/go" && GOMODCACHE="$CACHE/gomod" GOCACHE="$CACHE/gobuild" GOFLAGS="-mod=readonly -buildvcs=false" \
    run_step "Go client" "$GO" build -o "$CACHE/bin/rmqgo.tmp" . && mv "$CACHE/bin/rmqgo.tmp" "$CACHE/bin/rmqgo")
else
  say "    Go is missing: bin/rmqgo not built (install Go >= 1.22 and run make peers again)"
  exit 1
fi

touch "$STAMP"
say "ready in $CACHE ($(du -sm "$CACHE" | cut -f1) MB)"
