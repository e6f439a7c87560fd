"""The demo's traffic: one producer and two consumer groups, with the official RocketMQ 5 client.

* ``DemoOrders`` gets a steady stream of messages (tags created/paid, keys order-N).
* Group ``billing`` acks everything.
* Group ``audit`` (retryMaxTimes=1) does not ack messages whose body asks for a retry the
  first time they arrive, and never acks the one "poison" message, which the broker then
  moves to %DLQ%audit.
The workload remembers message IDs worth looking up in the dashboard: a plain one, a
retried one, the dead-lettered one and the first one acknowledged after the failover.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

from rocketmq import ClientConfiguration, Credentials, FilterExpression, Message, Producer, SimpleConsumer

TOPIC = "DemoOrders"
GROUPS = ("billing", "audit")
RETRY_EVERY = 25


@dataclass
class Stats:
    sent: int = 0
    send_failures: int = 0
    consumed: dict[str, int] = field(default_factory=lambda: dict.fromkeys(GROUPS, 0))
    # at-least-once: after a leader change the new leader's consumer offsets can be a few seconds old, so some
    # messages come again; they are counted here instead of in ``consumed`` (distinct message IDs)
    redelivered: dict[str, int] = field(default_factory=lambda: dict.fromkeys(GROUPS, 0))
    seen: dict[str, set[str]] = field(default_factory=lambda: {g: set() for g in GROUPS})
    normal_id: str = ""
    retried_id: str = ""
    poison_id: str = ""
    after_failover_id: str = ""
    redelivered_id: str = ""  # the first message a group got again after acking it (see Stats.redelivered)
    lock: threading.Lock = field(default_factory=threading.Lock)


class Workload:
    def __init__(self, endpoints: str, rate_per_s: float = 20.0) -> None:
        logging.getLogger("rocketmq-python-client").setLevel(logging.CRITICAL)
        self.config = ClientConfiguration(endpoints, Credentials())
        self.rate = rate_per_s
        self.stats = Stats()
        self.stop_event = threading.Event()
        self.failover_at = 0.0  # set by the demo when it kills the leader
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        self._threads = [threading.Thread(target=self._produce, name="demo-producer", daemon=True)]
        self._threads += [threading.Thread(target=self._consume, args=(g,), name=f"demo-{g}", daemon=True)
                          for g in GROUPS]
        for t in self._threads:
            t.start()

    def stop(self) -> None:
        self.stop_event.set()
        for t in self._threads:
            t.join(30)

    # --------------------------------------------------------------- producer
    def _produce(self) -> None:
        producer = Producer(self.config, (TOPIC,))
        producer.startup()
        try:
            i = 0
            while not self.stop_event.is_set():
                i += 1
                body = "poison: never acknowledged" if i == 5 else (
                    f"order {i}: retry-me" if i % RETRY_EVERY == 0 else f"order {i}")
                msg = Message()
                msg.topic, msg.body, msg.tag = TOPIC, body.encode(), "created" if i % 2 else "paid"
                msg.keys = f"order-{i}"
                try:
                    receipt = producer.send(msg)
                except Exception:
                    with self.stats.lock:
                        self.stats.send_failures += 1
                    self.stop_event.wait(0.2)
                    continue
                with self.stats.lock:
                    s = self.stats
                    s.sent += 1
                    if i == 5:
                        s.poison_id = receipt.message_id
                    elif i % RETRY_EVERY == 0 and not s.retried_id:
                        s.retried_id = receipt.message_id
                    elif not s.normal_id:
                        s.normal_id = receipt.message_id
                    if self.failover_at and not s.after_failover_id:
                        s.after_failover_id = receipt.message_id
                self.stop_event.wait(1.0 / self.rate)
        finally:
            producer.shutdown()

    # -------------------------------------------------------------- consumers
    def _consume(self, group: str) -> None:
        consumer = SimpleConsumer(self.config, group, {TOPIC: FilterExpression("*")}, await_duration=2)
        consumer.startup()
        try:
            while not self.stop_event.is_set():
                try:
                    messages = consumer.receive(16, 5)
                except Exception:
                    self.stop_event.wait(0.5)  # a failover in progress: the client reconnects by itself
                    continue
                for m in messages:
                    body = bytes(m.body)
                    if group == "audit" and (body.startswith(b"poison") or
                                             (body.endswith(b"retry-me") and m.delivery_attempt < 2)):
                        continue  # not acked: redelivered after the invisible time, then dead-lettered
                    try:
                        consumer.ack(m)
                    except Exception:
                        continue  # expired handle or failover: the message comes again
                    with self.stats.lock:
                        if m.message_id in self.stats.seen[group]:
                            self.stats.redelivered[group] += 1
                            self.stats.redelivered_id = self.stats.redelivered_id or m.message_id
                        else:
                            self.stats.seen[group].add(m.message_id)
                            self.stats.consumed[group] += 1
        finally:
            consumer.shutdown()

    def summary(self) -> str:
        with self.stats.lock:
            s = self.stats
            again = sum(s.redelivered.values())
            return (f"sent {s.sent} (failed sends {s.send_failures}), consumed "
                    + ", ".join(f"{g} {n}" for g, n in s.consumed.items())
                    + (f" (+{again} redelivered)" if again else ""))


def wait_for_traffic(workload: Workload, messages: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with workload.stats.lock:
            if workload.stats.consumed["billing"] >= messages:
                return True
        time.sleep(0.2)
    return False
