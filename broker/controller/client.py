"""A client of the controller group that follows the leader.

Followers answer CONTROLLER_NOT_LEADER naming the leader's id and address.  The client
prefers the address *from its own list* that answered as that id before (so a broker
that reaches controllers through a proxy or NAT keeps using its own route), then the
advertised address if it is in the list, then simply the next controller.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import grpc

from rocketscope.broker.protocol import controller_pb2_grpc

from .state import Code

log = logging.getLogger(__name__)


class ControllerUnavailable(Exception):
    """No controller answered as leader."""


class ControllerClient:
    def __init__(self, addresses: list[str], channel: Callable[..., grpc.aio.Channel] = grpc.aio.insecure_channel
                 ) -> None:
        if not addresses:
            raise ValueError("no controller addresses")
        self.addresses = list(addresses)
        self.make_channel = channel
        self.leader: str | None = None
        self.ids: dict[str, str] = {}  # address -> controller id that answered there
        self._channels: dict[str, grpc.aio.Channel] = {}

    def stub(self, addr: str) -> controller_pb2_grpc.ControllerStub:
        ch = self._channels.get(addr)
        if ch is None:
            # Why a 200 ms ceiling: a master cut off from the controllers learns it was deposed from the first
            # heartbeat answer after the heal, and until then it holds the sends of the clients connected to
            # it; with a 500 ms ceiling that took 0.1-0.66 s after the heal (docs/CHAOS.md, session 16).
            ch = self.make_channel(addr, options=[("grpc.initial_reconnect_backoff_ms", 50),
                                                  ("grpc.max_reconnect_backoff_ms", 200)])
            self._channels[addr] = ch
        return controller_pb2_grpc.ControllerStub(ch)

    def _hint(self, leader_id: str, leader_addr: str) -> str | None:
        for addr, cid in self.ids.items():
            if cid == leader_id and leader_id:
                return addr
        return leader_addr if leader_addr in self.addresses else None

    async def call(self, method: str, request: Any, timeout: float = 3.0) -> Any:
        """Call ``method`` on the leader; raise ControllerUnavailable when none answers as leader."""
        order = ([self.leader] if self.leader else []) + [a for a in self.addresses if a != self.leader]
        queue = list(order)
        tried: set[str] = set()
        last = "no controller reachable"
        for _ in range(len(self.addresses) * 2 + 1):
            if not queue:
                break
            addr = queue.pop(0)
            if addr in tried:
                continue
            tried.add(addr)
            try:
                resp = await getattr(self.stub(addr), method)(request, timeout=timeout)
            except grpc.aio.AioRpcError as exc:
                last = f"{addr}: {exc.code().name}"
                if self.leader == addr:
                    self.leader = None
                continue
            st = resp.status
            if st.code == Code.CONTROLLER_NOT_LEADER:
                last = f"{addr}: {st.remark}"
                if st.leader_id and st.leader_addr == "" and st.leader_id == self.ids.get(addr):
                    continue
                hint = self._hint(st.leader_id, st.leader_addr)
                if hint and hint not in tried:
                    queue.insert(0, hint)
                continue
            if st.leader_id:
                self.ids[addr] = st.leader_id
            self.leader = addr
            return resp
        self.leader = None
        raise ControllerUnavailable(f"{method}: no controller leader ({last})")

    async def call_all(self, method: str, request: Any, timeout: float = 1.0) -> list[tuple[str, Any]]:
        """``method`` on every controller at once (heartbeats); failures are dropped."""
        async def one(addr: str) -> tuple[str, Any] | None:
            try:
                return addr, await getattr(self.stub(addr), method)(request, timeout=timeout)
            except grpc.aio.AioRpcError:
                return None
        results = await asyncio.gather(*(one(a) for a in self.addresses))
        out = [r for r in results if r is not None]
        for addr, resp in out:
            if resp.status.code != Code.CONTROLLER_NOT_LEADER and resp.status.leader_id:
                self.ids[addr] = resp.status.leader_id
                self.leader = addr
        return out

    async def close(self) -> None:
        for ch in self._channels.values():
            await ch.close()
        self._channels.clear()
