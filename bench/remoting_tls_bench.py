"""Produce over plaintext remoting against produce over TLS remoting, on one permissive broker port.

    .venv/bin/python bench/remoting_tls_bench.py [--messages 3000] [--rounds 2]

A figure for issue 19's remoting TLS (docs/REMOTING.md), reported and never asserted: one name
server and one broker in ``tls.server.mode=permissive`` (development certificates), so both
phases use the same port and process; Apache's Go client v2 (tests/clients/go's rmqgo, ``SendSync``
in 16 goroutines, 1 KiB bodies, 200 untimed warm-up sends) without and with ``WithTls``.  Rounds
alternate nothing (plain first): compare the broker's CPU per message, which swings less with the
machine's other load than msg/s.  Not part of ``make bench``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent / "tests")]

from cluster import LocalCluster, wait_until  # noqa: E402
from go_clients import rmqgo  # noqa: E402
from test_remoting_tls_e2e import start_namesrv, tls_conf, wait_registered  # noqa: E402

from rocketscope.broker.remoting.client import RemotingClient  # noqa: E402
from rocketscope.broker.remoting.codec import RequestCode  # noqa: E402
from rocketscope.broker.security.certs import generate_dev_certs  # noqa: E402

WARMUP = 200


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100  # utime + stime, clock ticks of 10 ms


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="remoting-tls-bench-"))
    certs = root / "certs"
    generate_dev_certs(certs)
    c = LocalCluster(root)
    try:
        ns = start_namesrv(c, "namesrv", tls_conf(certs, "permissive"))
        node = c.start_broker("broker-bench", namesrvAddr=ns, **tls_conf(certs, "permissive"))
        wait_registered(ns, certs, "broker-bench")
        with RemotingClient(node.admin_addr) as b:
            assert b.invoke(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "BenchTls", "readQueueNums": "4",
                                                                  "writeQueueNums": "4", "perm": "6"}).code == 0
        with RemotingClient(ns) as n:
            wait_until(lambda: n.invoke(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "BenchTls"}).code == 0,
                       timeout=30, what="route")
        assert node.proc.popen is not None
        pid = node.proc.popen.pid
        for rnd in range(args.rounds):
            for tls in (False, True):
                cmd = [rmqgo(), "produce", "-ns", ns, "-topic", "BenchTls", "-n", str(args.messages), "-size",
                       "1024", "-depth", "16", "-quiet", "-warmup", str(WARMUP), *(["-tls"] if tls else [])]
                before = cpu_s(pid)
                out = subprocess.run(cmd, capture_output=True, text=True, timeout=600).stdout
                used = cpu_s(pid) - before
                summary = next(json.loads(line) for line in out.splitlines() if '"summary"' in line)
                print(json.dumps({"round": rnd, "tls": tls, "sent": summary["sent"], "failed": summary["failed"],
                                  "msg_per_s": round(summary["sent"] / summary["seconds"]),
                                  "broker_cpu_us_per_msg": round(used * 1e6 / (args.messages + WARMUP))}),
                      flush=True)
    except BaseException:
        print(c.logs(), file=sys.stderr)
        raise
    finally:
        c.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
