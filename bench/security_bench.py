"""Throughput with TLS and ACL on vs plaintext without ACL, in the same run (issue 10; target >= 0.85x).

    .venv/bin/python bench/security_bench.py [--messages 3000] [--depth 64] [--rounds 3] [--permissive]

Two standalone brokers on loopback, started side by side: ``plain`` (tls.server.mode
disabled, no ACL) and ``secure`` (tls.server.mode=enforcing with a genCerts pair, aclEnable
with one account whose PUB on the topic is granted by topicPerms).  The official client
sends 1 KiB messages with ``--depth`` sends in flight (send_async) and one at a time (for
latency); the broker's CPU per message (/proc, all threads) is recorded too, because on a
shared machine throughput swings with other load while CPU per message barely does.
Rounds alternate the order of the configurations; the median round of each counts.
``--permissive`` adds a broker in permissive mode (the TLS client goes through the sniffing
front end); ``--breakdown`` adds TLS-only and ACL-only brokers.  Results to
bench/results/security.json.

Needs the broker wiring of docs/SECURITY.md (the secure broker must actually do TLS/ACL:
the script checks that a plaintext connection to it is refused before measuring).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
CERTS = Path(tempfile.mkdtemp(prefix="rs-secbench-ca-"))
os.environ["GRPC_DEFAULT_SSL_ROOTS_FILE_PATH"] = str(CERTS / "ca.pem")  # the official client trusts our CA

from cluster import LocalCluster  # noqa: E402

BODY = b"x" * 1024
TOPIC = "BenchSecure"
AK, SK = "benchProducer", "bench-secret-123"


def progress(text: str) -> None:
    print(f"[security-bench] {text}", flush=True)


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * q))] * 1000 if values else 0.0


from load import pipelined_sends  # noqa: E402


def run_producer(endpoint: str, tls: bool, creds: tuple[str, str], messages: int, depth: int,
                 sync_messages: int, pid: int) -> dict[str, float]:
    from rmq import message
    from rocketmq import ClientConfiguration, Credentials, Producer

    p = Producer(ClientConfiguration(endpoint, Credentials(*creds)), (TOPIC,), tls_enable=tls)
    p.startup()
    try:
        for _ in range(50):  # warm-up: channels, routes, settings
            p.send(message(TOPIC, BODY))
        lat: list[float] = []
        for _ in range(sync_messages):
            s = time.perf_counter()
            p.send(message(TOPIC, BODY))
            lat.append(time.perf_counter() - s)
        res = pipelined_sends(p, lambda: message(TOPIC, BODY), messages, depth, pid)
        if res.pop("failed"):
            raise RuntimeError("some sends failed")
        return {**res, "sync_p50_ms": pct(lat, 0.5), "sync_p99_ms": pct(lat, 0.99)}
    finally:
        p.shutdown()


def check_enforcing(endpoint: str) -> None:
    import grpc
    from rocketmq.grpc_protocol import service_pb2 as svc
    from rocketmq.grpc_protocol import service_pb2_grpc as svc_grpc

    with grpc.insecure_channel(endpoint) as ch:
        req = svc.QueryRouteRequest()
        req.topic.name = TOPIC
        try:
            svc_grpc.MessagingServiceStub(ch).QueryRoute(req, timeout=5)
        except grpc.RpcError:
            return
    raise SystemExit("the secure broker answered plaintext: it is not wired for TLS (see docs/SECURITY.md)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=3000)
    ap.add_argument("--sync-messages", type=int, default=300)
    ap.add_argument("--depth", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--permissive", action="store_true")
    ap.add_argument("--breakdown", action="store_true", help="also TLS only and ACL only")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "security.json")
    args = ap.parse_args()

    from rocketscope.broker.security.certs import generate_dev_certs

    generate_dev_certs(CERTS, overwrite=True)
    root = Path(tempfile.mkdtemp(prefix="rs-secbench-"))
    acl = root / "plain_acl.yml"
    acl.write_text(f"accounts:\n  - accessKey: {AK}\n    secretKey: \"{SK}\"\n    defaultTopicPerm: DENY\n"
                   f"    topicPerms:\n      - {TOPIC}=PUB\n")
    tls = {"tls.server.mode": "enforcing", "tls.server.certPath": CERTS / "server.pem",
           "tls.server.keyPath": CERTS / "server.key", "tls.server.trustCertPath": CERTS / "ca.pem",
           "tls.client.trustCertPath": CERTS / "ca.pem"}
    c = LocalCluster(root)
    results: dict[str, list[dict[str, float]]] = {}
    try:
        nodes = {"plain": (c.start_broker("plain", namesrvAddr=""), False, ("", "")),
                 "secure": (c.start_broker("secure", namesrvAddr="", aclEnable="true", aclFile=acl, **tls), True,
                            (AK, SK))}
        if args.permissive:
            nodes["permissive"] = (c.start_broker("permissive", namesrvAddr="", aclEnable="true", aclFile=acl,
                                                  **{**tls, "tls.server.mode": "permissive"}), True, (AK, SK))
        if args.breakdown:
            nodes["tls-only"] = (c.start_broker("tls-only", namesrvAddr="", **tls), True, ("", ""))
            nodes["acl-only"] = (c.start_broker("acl-only", namesrvAddr="", aclEnable="true", aclFile=acl), False,
                                 (AK, SK))
        check_enforcing(nodes["secure"][0].endpoint)
        for r in range(args.rounds):
            order = list(nodes) if r % 2 == 0 else list(reversed(nodes))
            for name in order:
                node, use_tls, creds = nodes[name]
                assert node.proc.popen is not None
                res = run_producer(node.endpoint, use_tls, creds, args.messages, args.depth, args.sync_messages,
                                   node.proc.popen.pid)
                results.setdefault(name, []).append(res)
                progress(f"round {r + 1} {name}: {res['msgs_per_s']:.0f} msg/s at depth {args.depth}, broker CPU "
                         f"{res['broker_cpu_us_per_msg']:.0f} us/msg, sync p50 {res['sync_p50_ms']:.2f} ms")
    finally:
        c.stop()
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(CERTS, ignore_errors=True)

    summary: dict[str, Any] = {"messages": args.messages, "depth": args.depth, "rounds": args.rounds,
                               "body_bytes": len(BODY), "configs": {}}
    for name, runs in results.items():
        summary["configs"][name] = {
            "msgs_per_s_median": statistics.median(r["msgs_per_s"] for r in runs),
            "broker_cpu_us_per_msg_median": statistics.median(r["broker_cpu_us_per_msg"] for r in runs),
            "sync_p50_ms_median": statistics.median(r["sync_p50_ms"] for r in runs),
            "sync_p99_ms_median": statistics.median(r["sync_p99_ms"] for r in runs),
            "runs": runs}
    base = summary["configs"]["plain"]["msgs_per_s_median"]
    base_cpu = summary["configs"]["plain"]["broker_cpu_us_per_msg_median"]
    for cfg in summary["configs"].values():
        cfg["ratio_vs_plain"] = cfg["msgs_per_s_median"] / base
        cfg["cpu_ratio_vs_plain"] = cfg["broker_cpu_us_per_msg_median"] / base_cpu
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=2) + "\n")
    print(f"\n{'config':<12}{'msg/s (median)':>16}{'ratio':>8}{'broker CPU us/msg':>19}{'ratio':>8}"
          f"{'sync p50 ms':>13}")
    for name, cfg in summary["configs"].items():
        print(f"{name:<12}{cfg['msgs_per_s_median']:>16.0f}{cfg['ratio_vs_plain']:>8.2f}"
              f"{cfg['broker_cpu_us_per_msg_median']:>19.0f}{cfg['cpu_ratio_vs_plain']:>8.2f}"
              f"{cfg['sync_p50_ms_median']:>13.2f}")
    ratio = summary["configs"]["secure"]["ratio_vs_plain"]
    print(f"\nTLS+ACL / plaintext = {ratio:.2f} (target >= 0.85): {'met' if ratio >= 0.85 else 'NOT met'}")


if __name__ == "__main__":
    main()
