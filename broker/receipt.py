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
SLAVE_ORIGIN = "slave"


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
    # who issued it when not the broker set's writer: SLAVE_ORIGIN for a slave acting for its master
    # (slaveReadEnable, broker/slave_read.py), whose hand-outs the master does not know by sequence
    origin: str = ""

    def encode(self) -> str:
        fields = (VERSION, self.broker, self.topic, str(self.queue_id), str(self.offset), str(self.seq),
                  str(self.deadline_ms))
        return SEP.join((*fields, self.origin) if self.origin else fields)

    @classmethod
    def decode(cls, text: str) -> ReceiptHandle:
        parts = text.split(SEP) if text else []
        if len(parts) not in (7, 8) or parts[0] != VERSION:
            raise ReceiptHandleError("receipt_handle is not one this broker issued")
        try:
            return cls(parts[1], parts[2], int(parts[3]), int(parts[4]), int(parts[5]), int(parts[6]),
                       parts[7] if len(parts) == 8 else "")
        except ValueError as exc:
            raise ReceiptHandleError(f"receipt_handle has a malformed number: {exc}") from exc
