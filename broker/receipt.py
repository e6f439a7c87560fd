"""Receipt handles: what a consumer gets with each delivery and returns to ack it.

A handle names the broker, the queue and offset the message was handed out from, and
a sequence number unique to that hand-out.  Only the newest hand-out's handle is valid:
after the invisible duration expires and the message is redelivered, an old handle is
refused with INVALID_RECEIPT_HANDLE instead of silently acking the new delivery.
"""

from __future__ import annotations

from dataclasses import dataclass

VERSION = "r1"
SEP = " "


class ReceiptHandleError(ValueError):
    pass


@dataclass(frozen=True)
class ReceiptHandle:
    broker: str
    topic: str
    queue_id: int
    offset: int
    seq: int
    deadline_ms: int

    def encode(self) -> str:
        return SEP.join((VERSION, self.broker, self.topic, str(self.queue_id), str(self.offset), str(self.seq),
                         str(self.deadline_ms)))

    @classmethod
    def decode(cls, text: str) -> ReceiptHandle:
        parts = text.split(SEP) if text else []
        if len(parts) != 7 or parts[0] != VERSION:
            raise ReceiptHandleError("receipt_handle is not one this broker issued")
        try:
            return cls(parts[1], parts[2], int(parts[3]), int(parts[4]), int(parts[5]), int(parts[6]))
        except ValueError as exc:
            raise ReceiptHandleError(f"receipt_handle has a malformed number: {exc}") from exc
