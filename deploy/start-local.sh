#!/usr/bin/env bash
# Start a sample cluster on loopback: a name server plus every broker (or container) config in a folder.
#   deploy/start-local.sh deploy/conf/dledger        # three-member DLedger group
#   deploy/start-local.sh deploy/conf/2m-2s-async    # two masters, two slaves (async replication)
#   deploy/start-local.sh deploy/conf/2m-2s-sync     # the same with SYNC_MASTER (inSyncReplicas=2)
#   deploy/start-local.sh deploy/conf/container      # two containers with crossed masters and slaves
#   deploy/start-local.sh deploy/conf/controller     # three controllers + a three-broker set in controller mode
# Logs go to /tmp/rocketscope/<folder>/*.log; stop everything with Ctrl-C.
set -euo pipefail
dir=${1:?usage: deploy/start-local.sh deploy/conf/<layout>}
bin=${ROCKETSCOPE:-$(dirname "$0")/../.venv/bin/rocketscope}
logs=/tmp/rocketscope/$(basename "$dir")
mkdir -p "$logs"
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait' EXIT INT TERM
"$bin" namesrv -p 9876 >"$logs/namesrv.log" 2>&1 & pids+=($!)
sleep 1
for c in "$dir"/controller-*.conf; do
  [ -e "$c" ] && { "$bin" controller -c "$c" >"$logs/$(basename "$c" .conf).log" 2>&1 & pids+=($!); }
done
if ls "$dir"/container-*.conf >/dev/null 2>&1; then
  for c in "$dir"/container-*.conf; do "$bin" container -c "$c" >"$logs/$(basename "$c" .conf).log" 2>&1 & pids+=($!); done
else
  for c in "$dir"/*.conf; do [[ $(basename "$c") == controller-* ]] && continue; "$bin" broker -c "$c" >"$logs/$(basename "$c" .conf).log" 2>&1 & pids+=($!); done
fi
echo "started ${#pids[@]} processes; logs in $logs"
echo "try: $bin admin clusterList -n 127.0.0.1:9876   and   $bin admin haStatus -n 127.0.0.1:9876"
wait
