"""Delay messages: held in a timer topic until their delivery time, then put to their topic.

Like RocketMQ 5's timer, a delay message is first stored in the system topic
``rmq_sys_wheel_timer`` with its real topic, queue and delivery time as properties, so
it is as durable as any message.  A heap of pending deliveries is rebuilt from that
topic at start-up (from the offset up to which everything was delivered), which makes
delays survive restarts.  Recall writes a tombstone record into the same topic, so a
recalled message stays recalled after a restart too.  Precision: 100 ms checks, one
second as promised by RocketMQ.
"""

from __future__ import annotations

import asyncio
import base64
import heapq
import logging
import time
from typing import TYPE_CHECKING

from .pop import QueueState
from .store.message_store import PutStatus
from .store.record import StoredMessage

if TYPE_CHECKING:
    from .broker import Broker

log = logging.getLogger(__name__)

TIMER_TOPIC = "rmq_sys_wheel_timer"
TIMER_GROUP = "CID_RMQ_SYS_TIMER"
REAL_TOPIC = "REAL_TOPIC"
REAL_QID = "REAL_QID"
DELIVER_MS = "TIMER_DELIVER_MS"
RECALL_OF = "TIMER_RECALL_OF"
START_DELIVER_TIME = "__STARTDELIVERTIME"
RECALL_HANDLE = "__RECALL_HANDLE"


class RecallError(Exception):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def make_recall_handle(broker: str, topic: str, deliver_ms: int, msg_id: str) -> str:
    raw = f"r1 {broker} {topic} {deliver_ms} {msg_id}".encode()
    return base64.urlsafe_b64encode(raw).decode()


def parse_recall_handle(handle: str) -> tuple[str, str, int, str]:
    try:
        parts = base64.urlsafe_b64decode(handle.encode()).decode().split(" ")
        if len(parts) != 5 or parts[0] != "r1":
            raise ValueError("unknown layout")
        return parts[1], parts[2], int(parts[3]), parts[4]
    except (ValueError, UnicodeDecodeError) as exc:
        raise RecallError("BAD", f"recall_handle is not one this broker issued ({exc})") from None


class TimerService:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.store = broker.store
        self.heap: list[tuple[int, int]] = []  # (deliver ms, timer-queue offset)
        self.by_msg_id: dict[str, int] = {}
        self.cancelled: set[int] = set()
        self.done = QueueState(0, 0)
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self.delivered_latency_ms: list[float] = []

    # ------------------------------------------------------------------ start
    def recover(self) -> None:
        self.broker.topics.create_if_absent(TIMER_TOPIC, 1, system=True)
        start = self.broker.offsets.get(TIMER_GROUP, TIMER_TOPIC, 0) or 0
        start = max(start, self.store.min_offset(TIMER_TOPIC, 0))
        self.done = QueueState(start, start)
        pos, end = start, self.store.max_offset(TIMER_TOPIC, 0)
        while pos < end:
            got = self.store.get(TIMER_TOPIC, 0, pos, 256)
            for msg in got.messages:
                self._track(msg)
            pos = got.next_offset if got.next_offset > pos else pos + 1
        pending = len(self.heap) - len(self.cancelled)
        log.info("timer recovered: %d delayed messages pending from timer offset %d", max(pending, 0), start)

    def _track(self, msg: StoredMessage) -> None:
        target = msg.properties.get(RECALL_OF)
        if target is not None:
            self.cancelled.add(int(target))
            self._mark_done(int(target))
            self._mark_done(msg.queue_offset)
            return
        deliver_ms = int(msg.properties.get(DELIVER_MS, "0") or 0)
        heapq.heappush(self.heap, (deliver_ms, msg.queue_offset))
        if msg.msg_id:
            self.by_msg_id[msg.msg_id] = msg.queue_offset
        self._wake.set()

    def _mark_done(self, offset: int) -> None:
        if self.done.mark_acked(offset):
            self.broker.offsets.commit(TIMER_GROUP, TIMER_TOPIC, 0, self.done.committed)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="timer")

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    @property
    def pending(self) -> int:
        return max(0, len(self.by_msg_id))

    # ----------------------------------------------------------------- accept
    def wrap(self, msg: StoredMessage, deliver_ms: int) -> None:
        """Turn a message into its timer-topic form (in place) before it is stored."""
        msg.properties[REAL_TOPIC] = msg.topic
        msg.properties[REAL_QID] = str(msg.queue_id)
        msg.properties[DELIVER_MS] = str(deliver_ms)
        msg.properties[RECALL_HANDLE] = make_recall_handle(self.broker.broker_name, msg.topic, deliver_ms, msg.msg_id)
        msg.topic = TIMER_TOPIC
        msg.queue_id = 0

    def accepted(self, msg: StoredMessage) -> None:
        self._track(msg)

    # ---------------------------------------------------------------- deliver
    async def _run(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), 0.1)
            except TimeoutError:
                pass
            self._wake.clear()
            try:
                await self.deliver_due()
            except Exception:
                log.exception("timer delivery pass failed; will retry")

    async def deliver_due(self) -> int:
        if not self.broker.is_master:
            return 0  # a slave's timer topic is a copy; its master delivers
        now = int(time.time() * 1000)
        delivered = 0
        while self.heap and self.heap[0][0] <= now:
            deliver_ms, offset = self.heap[0]
            if offset in self.cancelled or offset < self.done.committed or offset in self.done.acked:
                heapq.heappop(self.heap)
                continue
            timer_msg = self.store.message_at(TIMER_TOPIC, 0, offset)
            if timer_msg is None:
                heapq.heappop(self.heap)
                self._mark_done(offset)
                continue
            real = self._unwrap(timer_msg)
            (res,) = await self.store.put([real])
            if res.message is None:
                log.error("cannot deliver delayed message %s: %s; retrying", timer_msg.msg_id, res.reason)
                return delivered
            if res.status is not PutStatus.PUT_OK:
                log.warning("delayed message %s delivered with status %s", timer_msg.msg_id, res.status.value)
            heapq.heappop(self.heap)
            self.by_msg_id.pop(timer_msg.msg_id, None)
            self._mark_done(offset)
            self.delivered_latency_ms.append(max(0, now - deliver_ms))
            del self.delivered_latency_ms[:-1000]
            self.broker.on_delay_delivered(real, now - deliver_ms)
            delivered += 1
        return delivered

    def _unwrap(self, msg: StoredMessage) -> StoredMessage:
        props = {k: v for k, v in msg.properties.items() if k not in (REAL_TOPIC, REAL_QID, DELIVER_MS)}
        return StoredMessage(topic=msg.properties[REAL_TOPIC], queue_id=int(msg.properties.get(REAL_QID, "0")),
                             body=msg.body, properties=props, flag=msg.flag, born_timestamp=msg.born_timestamp,
                             born_host=msg.born_host, reconsume_times=msg.reconsume_times)

    # ----------------------------------------------------------------- recall
    async def recall(self, topic: str, handle: str) -> str:
        broker, h_topic, _deliver_ms, msg_id = parse_recall_handle(handle)
        if broker != self.broker.broker_name:
            raise RecallError("BAD", f"recall_handle belongs to broker {broker}, not {self.broker.broker_name}")
        if h_topic != topic:
            raise RecallError("BAD", f"recall_handle is for topic {h_topic}, not {topic}")
        offset = self.by_msg_id.get(msg_id)
        if offset is None or offset in self.cancelled:
            raise RecallError("NOT_FOUND", f"message {msg_id} was already delivered, recalled, or never delayed")
        tomb = StoredMessage(topic=TIMER_TOPIC, queue_id=0, body=b"recall",
                             properties={RECALL_OF: str(offset), "UNIQ_KEY": f"{msg_id}-recall"})
        (res,) = await self.store.put([tomb])
        if res.message is None:
            raise RecallError("FAILED", f"cannot record the recall: {res.reason or res.status.value}")
        self.cancelled.add(offset)
        self.by_msg_id.pop(msg_id, None)
        self._mark_done(offset)
        self._mark_done(res.message.queue_offset)
        log.info("delayed message %s of topic %s recalled", msg_id, topic)
        return msg_id
