"""`rocketscope demo`: a name server and a broker on loopback, a few messages through them.

Until the full demo (replication group, failover, Spark, dashboard) lands, this shows
the core working with the official RocketMQ 5 client and prints what happened.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import click

from .procs import free_port, port_open, spawn, stop_all, wait_for


def step(text: str) -> None:
    click.echo(click.style("==> ", fg="cyan") + text)


def run_demo(count: int) -> int:
    work = Path(tempfile.mkdtemp(prefix="rocketscope-demo-"))
    ns_port, grpc_port, listen_port = free_port(), free_port(), free_port()
    namesrv = f"127.0.0.1:{ns_port}"
    try:
        step(f"starting a name server on {namesrv} (logs in {work})")
        spawn(["namesrv", "-p", str(ns_port)], work / "namesrv.log")
        wait_for(lambda: port_open(ns_port), 20, "the name server")
        conf = work / "broker.conf"
        conf.write_text(f"brokerName=broker-a\nnamesrvAddr={namesrv}\ngrpcServerPort={grpc_port}\n"
                        f"listenPort={listen_port}\nstorePathRootDir={work / 'store'}\nflushDiskType=SYNC_FLUSH\n"
                        "mappedFileSizeCommitLog=16777216\n")
        step(f"starting a broker: clients on 127.0.0.1:{grpc_port}, admin on 127.0.0.1:{listen_port}")
        spawn(["broker", "-c", str(conf)], work / "broker.log")
        wait_for(lambda: port_open(grpc_port) and port_open(listen_port), 30, "the broker")
        admin = [str(Path(sys.executable).parent / "rocketscope"), "admin"]
        wait_for(lambda: "broker-a" in subprocess.run([*admin, "clusterList", "-n", namesrv],
                                                      capture_output=True, text=True).stdout, 30, "registration")
        subprocess.run([*admin, "updateTopic", "-n", namesrv, "-c", "DefaultCluster", "-t", "DemoTopic", "-r", "4",
                        "-w", "4"], check=True, capture_output=True)
        subprocess.run([*admin, "clusterList", "-n", namesrv], check=True)

        import logging

        from rocketmq import ClientConfiguration, Credentials, FilterExpression, Message, Producer, SimpleConsumer

        logging.getLogger("rocketmq-python-client").setLevel(logging.WARNING)

        cfg = ClientConfiguration(f"127.0.0.1:{grpc_port}", Credentials())
        step(f"sending {count} messages with the official RocketMQ 5 Python client")
        producer = Producer(cfg, ("DemoTopic",))
        producer.startup()
        sent = {}
        for i in range(count):
            m = Message()
            m.topic = "DemoTopic"
            m.body = f"hello from the demo, message {i}".encode()
            m.tag = "demo"
            m.keys = f"order-{i}"
            t0 = time.perf_counter()
            receipt = producer.send(m)
            sent[receipt.message_id] = (time.perf_counter() - t0) * 1000
            ms = sent[receipt.message_id]
            click.echo(f"    sent {receipt.message_id}  queue offset {receipt.offset}  {ms:.1f} ms")
        producer.shutdown()

        step("consuming them with a SimpleConsumer (group DemoGroup)")
        consumer = SimpleConsumer(cfg, "DemoGroup", {"DemoTopic": FilterExpression("*")}, await_duration=2)
        consumer.startup()
        got = 0
        deadline = time.monotonic() + 30
        while got < count and time.monotonic() < deadline:
            for msg in consumer.receive(16, 15):
                consumer.ack(msg)
                got += 1
                click.echo(f"    received {msg.message_id}  {msg.body.decode()!r}  attempt {msg.delivery_attempt}")
        consumer.shutdown()

        step("consumer progress (rocketscope admin consumerProgress -g DemoGroup)")
        subprocess.run([*admin, "consumerProgress", "-n", namesrv, "-g", "DemoGroup"], check=False)
        first = next(iter(sent))
        step(f"where is message {first}? (rocketscope admin queryMsgById -i {first})")
        out = subprocess.run([*admin, "queryMsgById", "-n", namesrv, "-i", first, "--json"], capture_output=True,
                             text=True)
        found = json.loads(out.stdout)[0] if out.returncode == 0 else {}
        click.echo(f"    stored on {found.get('broker')} queue {found.get('queueId')} offset "
                   f"{found.get('queueOffset')} at commit-log offset {found.get('commitLogOffset')}")
        ok = got == count
        step(f"all {count} messages sent and consumed" if ok else f"only {got} of {count} consumed")
        return 0 if ok else 1
    except KeyboardInterrupt:
        click.echo("\ninterrupted; stopping everything")
        return 130
    finally:
        stop_all()
        step("stopped the broker and the name server")
