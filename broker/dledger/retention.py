"""Retention in DLedger mode: fileReservedTime, deleteWhen and diskMaxUsedSpaceRatio, bounded below
by the point every member of the group has applied.

The Raft log is the commit log (broker/dledger/log_store.py), so deleting a segment also
deletes Raft entries.  There are no snapshots, so we chose to *refuse to delete what a member
still needs* rather than ship segments to a lagging member: a segment goes only when it lies
below the **group floor**, the smallest of

* the commit index,
* every member's match index as the leader knows it (a member the leader has not heard from
  since it took office counts as 0: nothing is deleted until every member answered),
* and, on this node, the dispatched offset (consume queues are built past it).

The leader computes the floor from its Raft progress; a follower learns it from the leader's
``HaStatus`` (refreshed at most once per retention interval; a follower that cannot reach the
leader keeps its last answer for three intervals, then deletes nothing).  After a deletion the
matching prefix of the Raft index is compacted, and the name of the first kept entry's term is
kept so AppendEntries still match.

Consequences (docs/STORAGE.md): a member that is down holds back deletion on every member
until it returns (or is removed from dLegerPeers), whatever the disk ratio; a member whose
store is lost must be re-seeded by copying a member's store directory.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import TYPE_CHECKING, Any

import grpc

from rocketscope.broker.protocol import admin_pb2_grpc, common_pb2

if TYPE_CHECKING:
    from rocketscope.broker.security.config import SecurityConfig
    from rocketscope.broker.store.message_store import MessageStore

    from .node import DLedgerNode

log = logging.getLogger(__name__)


def floor_index_of(status: dict[str, Any], members: int) -> int:
    """The group floor from a leader's ``HaStatus``: min of commit and every member's match (0 if one is unknown)."""
    matches = [int(p["match"]) for p in status.get("peers", {}).values() if "match" in p]
    if len(matches) < members - 1:
        return 0
    return min([int(status.get("commitIndex", 0)), *matches])


class DLedgerRetention:
    """Given what it uses (issue 17): the DLedger member (its Raft progress and log), the store whose
    retention it bounds, and the security settings for asking the leader.  The store calls :meth:`floor`
    and :meth:`on_deleted` through its ``StoreHooks`` (broker/broker.py ``_store_hooks``)."""

    def __init__(self, member: DLedgerNode, store: MessageStore, security: SecurityConfig) -> None:
        self.member = member
        self.store = store
        self.security = security
        self._learned = 0  # follower: the floor index the leader reported
        self._learned_at = 0.0
        self._refresh: asyncio.Task[None] | None = None
        self.compactions = 0

    # ------------------------------------------------------------------ floor
    def floor_index(self) -> int:
        d: DLedgerNode | None = self.member
        if d is None or d.node is None or d.log is None:
            return 0
        if d.is_leader:
            progress = d.node.progress()
            others = [p for p in d.peers if p != d.self_id]
            if any(p not in progress for p in others):
                return 0
            return min([d.commit_index, *(progress[p][0] for p in others)])
        self._schedule_refresh()
        interval = self.store.config.retention.interval_s
        if time.monotonic() - self._learned_at > 3 * interval + 5:
            return 0
        return min(self._learned, d.commit_index)

    def floor(self) -> int:
        """Commit-log offset below which every member has applied (0: delete nothing)."""
        d: DLedgerNode | None = self.member
        index = self.floor_index()
        if d is None or d.log is None or index <= d.log.base:
            return 0 if d is None or d.log is None else d.log.base_end
        index = min(index, d.log.last_index())
        return min(d.log.end_offset(index), self.store.dispatched)

    def on_deleted(self, min_offset: int) -> None:
        d: DLedgerNode | None = self.member
        if d is None or d.log is None:
            return
        d.log.compact_below(min_offset, min(self.floor_index(), d.commit_index))
        self.compactions += 1

    # --------------------------------------------------------------- follower
    def _schedule_refresh(self) -> None:
        if self._refresh is not None and not self._refresh.done():
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._refresh = loop.create_task(self._fetch(), name="dledger-retention-floor")

    async def _fetch(self) -> None:
        d: DLedgerNode | None = self.member
        addr = d.leader_admin_addr() if d is not None else None
        if d is None or not addr:
            return
        sec = self.security
        try:
            async with sec.client_tls.channel(addr) as channel:
                resp = await admin_pb2_grpc.BrokerAdminStub(channel).HaStatus(
                    common_pb2.Empty(), timeout=5, metadata=sec.inner_metadata())
            status = json.loads(resp.json)
        except (grpc.aio.AioRpcError, ValueError) as exc:
            log.debug("retention floor from leader %s: %s", addr, exc)
            return
        if status.get("role") != "LEADER":
            return
        self._learned = floor_index_of(status, len(d.peers))
        self._learned_at = time.monotonic()
