"""The workload: the official RocketMQ 5 Python client, used the way an application would.

Producers (one client with a transaction checker):
* normal sends, one at a time, as fast as ~30/s (the no-send window is measured on them);
* FIFO sends in three message groups, each group's messages sent one after the other;
* delayed sends (2–3 s ahead, ``delivery_timestamp`` in whole seconds);
* transactions, each decided up front from the seed: commit, rollback, or left open and
  resolved by the check-back (commit or rollback).  The checker answers from that decision,
  so a transaction whose ``commit()`` call failed is still committed by its check-back.

Consumers: two SimpleConsumer groups (receive + ack; group A deliberately leaves a seeded
~2% of its deliveries unacknowledged, the ground truth for redeliveries) and one
PushConsumer group.  Every group subscribes to every topic; all groups are orderly.

Message bodies are unique keys (``<kind>-<n>``); the checker works on keys, message IDs are
kept for the report.
"""

from __future__ import annotations

import random
import threading
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from rmq import config, message
from rocketmq import (
    ConsumeResult,
    FilterExpression,
    Message,
    MessageListener,
    Producer,
    PushConsumer,
    SimpleConsumer,
    TransactionChecker,
    TransactionResolution,
)

from chaos.checker import STALL_S
from chaos.harness import GROUPS, TOPICS
from chaos.history import History
from rocketscope.broker.receipt import ReceiptHandle, ReceiptHandleError

FIFO_GROUPS = ("g0", "g1", "g2")
INVISIBLE_S = 5  # receive's invisible duration: an unacknowledged message comes back after this
SKIP_ACK = 0.02  # fraction of group A's deliveries left unacknowledged on purpose
# receive loops per SimpleConsumer group: one receive reads one queue and long-polls 2 s when it is
# empty, so a single loop over 16 queues drained a backlog at about 2 msg/s (docs/CHAOS.md, session 9)
RECEIVERS_PER_GROUP = 4


def _err(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc)[:200]}"


def queue_position(msg: Message) -> str | None:
    """Where the delivered copy is stored ("topic/queue/offset", from RocketScope's receipt handle), so
    the checker tells a message stored twice (a send retried across a failover) from one handed out twice."""
    try:
        h = ReceiptHandle.decode(msg.receipt_handle or "")
    except ReceiptHandleError:
        return None
    return f"{h.topic}/{h.queue_id}/{h.offset}"


class _Checker(TransactionChecker):
    def __init__(self, wl: Workload) -> None:
        self.wl = wl

    def check(self, msg: Message) -> TransactionResolution:
        key = msg.body.decode(errors="replace")
        decision = self.wl.tx_decision.get(key, "rollback")
        self.wl.h.add("info", "checkback", "tx-checker", key=key, decision=decision)
        return TransactionResolution.COMMIT if decision == "commit" else TransactionResolution.ROLLBACK


class _Listener(MessageListener):
    def __init__(self, wl: Workload, group: str) -> None:
        self.wl = wl
        self.group = group

    def consume(self, msg: Message) -> ConsumeResult:
        self.wl.record_delivery(self.group, msg, "push")
        return ConsumeResult.SUCCESS


class Workload:
    """Starts the producer and consumer threads; ``stop_producers`` then ``wait_consumed`` then ``stop``."""

    def __init__(self, endpoint: str, h: History, seed: int) -> None:
        self.endpoint = endpoint
        self.h = h
        self.rng = random.Random(seed ^ 0x5EED)
        self.tx_decision: dict[str, str] = {}
        self.producing = threading.Event()
        self.consuming = threading.Event()
        self.threads: list[threading.Thread] = []
        self.producer_threads: list[threading.Thread] = []
        self.consumers: list[Any] = []
        self.seen: dict[str, set[str]] = {g: set() for g in GROUPS}
        self.lock = threading.Lock()
        self.producer: Producer | None = None

    # ------------------------------------------------------------ producing
    def _send(self, proc: str, kind: str, key: str, build: Any, tx: Any = None, **values: Any) -> bool:
        msg = build()
        self.h.add("invoke", "send", proc, kind=kind, key=key, topic=msg.topic, **values)
        try:
            assert self.producer is not None
            receipt = self.producer.send(msg, tx) if tx is not None else self.producer.send(msg)
        except Exception as exc:
            self.h.add("info", "send", proc, kind=kind, key=key, msg_id=msg.message_id, error=_err(exc), **values)
            return False
        self.h.add("ok", "send", proc, kind=kind, key=key, msg_id=receipt.message_id, **values)
        return True

    def _normal(self) -> None:
        n = 0
        while self.producing.is_set():
            key = f"n-{n}"
            n += 1
            self._send("p-normal", "normal", key, lambda k=key: message(TOPICS[0], k.encode()))
            time.sleep(0.02)

    def _fifo(self) -> None:
        idx = dict.fromkeys(FIFO_GROUPS, 0)
        turn = 0
        while self.producing.is_set():
            g = FIFO_GROUPS[turn % len(FIFO_GROUPS)]
            turn += 1
            key = f"f-{g}-{idx[g]}"

            def build(k: str = key, g: str = g) -> Message:
                m = message(TOPICS[1], k.encode())
                m.message_group = g
                return m
            self._send("p-fifo", "fifo", key, build, group=g, idx=idx[g])
            idx[g] += 1
            time.sleep(0.05)

    def _delay(self) -> None:
        n = 0
        while self.producing.is_set():
            key = f"d-{n}"
            n += 1
            due = int(time.time()) + 2 + (n % 2)

            def build(k: str = key, due: int = due) -> Message:
                m = message(TOPICS[2], k.encode())
                m.delivery_timestamp = due
                return m
            self._send("p-delay", "delay", key, build, due=due)
            time.sleep(0.4)

    def _tx(self) -> None:
        n = 0
        while self.producing.is_set():
            key = f"t-{n}"
            n += 1
            plan = self.rng.choice(("commit", "commit", "rollback", "unknown-commit", "unknown-rollback"))
            self.tx_decision[key] = "commit" if plan.endswith("commit") else "rollback"
            try:
                assert self.producer is not None
                tx = self.producer.begin_transaction()
            except Exception as exc:
                self.h.add("info", "begin", "p-tx", key=key, error=_err(exc))
                time.sleep(0.3)
                continue
            if self._send("p-tx", "tx", key, lambda k=key: message(TOPICS[3], k.encode()), tx=tx, plan=plan,
                          decision=self.tx_decision[key]) and not plan.startswith("unknown"):
                f = "commit" if plan == "commit" else "rollback"
                self.h.add("invoke", f, "p-tx", key=key)
                try:
                    tx.commit() if f == "commit" else tx.rollback()
                    self.h.add("ok", f, "p-tx", key=key)
                except Exception as exc:
                    self.h.add("info", f, "p-tx", key=key, error=_err(exc))
            time.sleep(0.3)

    # ------------------------------------------------------------ consuming
    def record_delivery(self, group: str, msg: Message, proc: str) -> dict[str, Any]:
        key = msg.body.decode(errors="replace")
        with self.lock:
            self.seen[group].add(key)
        return self.h.add("ok", "deliver", proc, group=group, key=key, msg_id=msg.message_id, topic=msg.topic,
                          attempt=msg.delivery_attempt, wall=time.time(), mgroup=msg.message_group,
                          pos=queue_position(msg))

    def _simple(self, group: str, consumer: SimpleConsumer, skip: float, loop: int = 0) -> None:
        rng = random.Random(zlib.crc32(f"{group}/{loop}".encode()))  # the same skip draws on every run
        while self.consuming.is_set():
            try:
                msgs = consumer.receive(16, INVISIBLE_S)
            except Exception as exc:
                self.h.add("fail", "receive", group, error=_err(exc))
                time.sleep(0.2)
                continue
            for m in msgs:
                ev = self.record_delivery(group, m, group)
                if skip and rng.random() < skip:
                    self.h.add("info", "noack", group, key=ev["key"], group=group)  # comes back after INVISIBLE_S
                    continue
                self.h.add("invoke", "ack", group, key=ev["key"], group=group)
                try:
                    consumer.ack(m)
                    self.h.add("ok", "ack", group, key=ev["key"], group=group)
                except Exception as exc:
                    self.h.add("fail", "ack", group, key=ev["key"], group=group, error=_err(exc))

    def start(self) -> None:
        """Start the four clients at once (each waits for its Settings), then the threads."""
        subs = {t: FilterExpression("*") for t in TOPICS}

        def producer() -> Any:
            p = Producer(config(self.endpoint), TOPICS, _Checker(self))
            p.startup()
            return p

        def simple(group: str) -> Any:
            c = SimpleConsumer(config(self.endpoint), group, subs, await_duration=2)
            c.startup()
            return c

        def push() -> Any:
            c = PushConsumer(config(self.endpoint), GROUPS[2], _Listener(self, GROUPS[2]), subs,
                             consumption_thread_count=2)
            c.startup()
            return c

        self.consuming.set()
        with ThreadPoolExecutor(4) as pool:
            futures = [pool.submit(producer), pool.submit(simple, GROUPS[0]), pool.submit(simple, GROUPS[1]),
                       pool.submit(push)]
            clients = [f.result(timeout=120) for f in futures]
        self.producer = clients[0]
        self.consumers = clients[1:]
        for group, skip, c in ((GROUPS[0], SKIP_ACK, clients[1]), (GROUPS[1], 0.0, clients[2])):
            for loop in range(RECEIVERS_PER_GROUP):
                self.threads.append(threading.Thread(target=self._simple, args=(group, c, skip, loop), daemon=True,
                                                     name=f"chaos-{group}-{loop}"))
        self.h.add("info", "clients-started", "workload")
        self.producing.set()
        self.producer_threads = [threading.Thread(target=target, daemon=True, name=f"chaos-{target.__name__}")
                                 for target in (self._normal, self._fifo, self._delay, self._tx)]
        self.threads += self.producer_threads
        for t in self.threads:
            t.start()

    def stop_producers(self, timeout: float = 60.0) -> None:
        """Stop producing and wait (up to ``timeout``) until each producer thread finished its current send
        (and its commit or rollback): a fixed second was waited before, which a loaded machine can outlast."""
        self.producing.clear()
        deadline = time.monotonic() + timeout
        for t in self.producer_threads:
            t.join(max(0.0, deadline - time.monotonic()))

    def wait_consumed(self, must: set[str], timeout: float, quiet: float = 3.0, idle: float = STALL_S) -> bool:
        """Until every group saw every key of ``must``, or no new one arrived for ``idle`` seconds, or ``timeout``.

        The drain keeps going while any group still receives keys it had not seen (FIFO keys
        included: a FIFO group that trickles is progressing), bounded by ``timeout``; what is
        still missing then is classified by the checker (tests/chaos/checker.py ``classify``:
        a backlog still being consumed, a stall, or a loss).  Delayed messages are always waited
        for (up to ``timeout``): after a controller-mode master change they were seen to arrive
        up to 64 s after their time.  On a loaded machine consumption goes on well after the load
        stopped, so a fixed drain time would call slow messages lost.  ``quiet`` seconds more
        collect strays.
        """
        start = time.monotonic()
        deadline = start + timeout
        last_progress, last_count = start, -1
        done = False
        while time.monotonic() < deadline:
            with self.lock:
                done = all(must <= s for s in self.seen.values())
                count = sum(len(must & s) for s in self.seen.values())
                # delayed messages, and committed transactions that await their check-back (after a kill the
                # producer's Telemetry stream comes back with its next route read, up to 30 s), are waited for
                delays_due = any(k.startswith(("d-", "t-")) for s in self.seen.values() for k in must - s)
            if done:
                break
            if count != last_count:
                last_progress, last_count = time.monotonic(), count
            elif time.monotonic() - last_progress > idle and not delays_due:
                break  # delayed messages can come a minute late after a master change: wait for them
            time.sleep(0.2)
        time.sleep(quiet)
        return done

    def stop(self) -> None:
        """Stop the threads and shut the clients down, each bounded in time (a client may hang in shutdown)."""
        self.producing.clear()
        self.consuming.clear()
        deadline = time.monotonic() + 20
        for t in self.threads:
            t.join(max(0.1, deadline - time.monotonic()))
        clients = [*self.consumers, *([self.producer] if self.producer is not None else [])]

        def shutdown(c: Any) -> None:
            try:
                c.shutdown()
            except Exception:
                pass
        closers = [threading.Thread(target=shutdown, args=(c,), daemon=True) for c in clients]
        for t in closers:
            t.start()
        for t in closers:
            t.join(max(0.1, deadline + 15 - time.monotonic()))
