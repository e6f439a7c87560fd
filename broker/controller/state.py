"""The controller's replicated state machine: broker sets, ids, masters, epochs, SyncStateSets.

Split the way RocketMQ's ``ReplicasInfoManager`` is, and for the same reason: a request
is first *decided* by the controller leader against the applied state and its own
broker-liveness table (which is not replicated: every controller keeps one from the
heartbeats it receives), producing events; only the events go through Raft, and every
controller *applies* them in log order.  ``apply`` is deterministic and checks the
epoch each event was decided against, so an event decided on a stale view (a deposed
leader, two requests racing) is ignored on every replica alike instead of corrupting the
set.  Nothing here does I/O or reads a clock: time comes in as ``now_ms`` arguments, so
tests/test_controller_state.py exercises every rule without processes.

Events are plain dicts (JSON in the Raft entries) with a ``type`` field:
``apply_broker_id``, ``update_address``, ``elect_master``, ``alter_sync_state_set``,
``clean_broker_data``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any


class Code(IntEnum):
    """RocketMQ's response codes (remoting ResponseCode.java), controller range 2000-2016."""

    SUCCESS = 0
    SYSTEM_ERROR = 1
    CONTROLLER_FENCED_MASTER_EPOCH = 2000
    CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH = 2001
    CONTROLLER_INVALID_MASTER = 2002
    CONTROLLER_INVALID_REPLICAS = 2003
    CONTROLLER_MASTER_NOT_AVAILABLE = 2004
    CONTROLLER_INVALID_REQUEST = 2005
    CONTROLLER_BROKER_NOT_ALIVE = 2006
    CONTROLLER_NOT_LEADER = 2007
    CONTROLLER_BROKER_METADATA_NOT_EXIST = 2008
    CONTROLLER_INVALID_CLEAN_BROKER_METADATA = 2009
    CONTROLLER_BROKER_NEED_TO_BE_REGISTERED = 2010
    CONTROLLER_MASTER_STILL_EXIST = 2011
    CONTROLLER_ELECT_MASTER_FAILED = 2012
    CONTROLLER_ALTER_SYNC_STATE_SET_FAILED = 2013
    CONTROLLER_BROKER_ID_INVALID = 2014
    CONTROLLER_JRAFT_INTERNAL_ERROR = 2015
    CONTROLLER_BROKER_LIVE_INFO_NOT_EXISTS = 2016


NO_MASTER = -1
FIRST_BROKER_ID = 1  # MixAll.FIRST_BROKER_CONTROLLER_ID: controller-issued ids start at 1


@dataclass
class ReplicaRecord:
    broker_id: int
    address: str = ""
    ha_address: str = ""
    grpc_address: str = ""
    check_code: str = ""


@dataclass
class BrokerSet:
    """RocketMQ's ``BrokerReplicaInfo`` and ``SyncStateInfo`` of one broker name, merged."""

    cluster: str
    name: str
    replicas: dict[int, ReplicaRecord] = field(default_factory=dict)
    next_id: int = FIRST_BROKER_ID
    master_id: int = NO_MASTER
    master_epoch: int = 0
    sync_state_set: tuple[int, ...] = ()
    sync_state_set_epoch: int = 0


@dataclass
class LiveInfo:
    """What the last heartbeat of one broker said (leader-local, never replicated)."""

    cluster: str
    name: str
    broker_id: int
    address: str = ""
    last_ms: int = 0
    timeout_ms: int = 10_000
    epoch: int = 0
    max_offset: int = 0
    confirm_offset: int = 0
    priority: int = 2**31 - 1


class LiveTable:
    """Broker liveness from heartbeats (DefaultBrokerHeartbeatManager), with the clock passed in."""

    def __init__(self) -> None:
        self.entries: dict[tuple[str, int], LiveInfo] = {}

    def heartbeat(self, info: LiveInfo) -> None:
        self.entries[(info.name, info.broker_id)] = info

    def get(self, name: str, broker_id: int) -> LiveInfo | None:
        return self.entries.get((name, broker_id))

    def alive(self, name: str, broker_id: int, now_ms: int) -> bool:
        info = self.entries.get((name, broker_id))
        return info is not None and now_ms - info.last_ms <= info.timeout_ms

    def remove(self, name: str, broker_id: int) -> None:
        self.entries.pop((name, broker_id), None)

    def expire(self, now_ms: int) -> list[LiveInfo]:
        """Drop and return the brokers whose heartbeat is older than their own timeout."""
        gone = [i for i in self.entries.values() if now_ms - i.last_ms > i.timeout_ms]
        for i in gone:
            del self.entries[(i.name, i.broker_id)]
        return gone

    def active(self, now_ms: int, name: str | None = None) -> int:
        return sum(1 for (n, _), i in self.entries.items()
                   if (name is None or n == name) and now_ms - i.last_ms <= i.timeout_ms)


@dataclass
class Decision:
    """The leader's answer to a request: a code, and the events to replicate when it is accepted."""

    code: Code
    remark: str = ""
    events: list[dict[str, Any]] = field(default_factory=list)
    broker_id: int = NO_MASTER

    @property
    def ok(self) -> bool:
        return self.code == Code.SUCCESS


LiveLookup = Callable[[int], LiveInfo | None]


def elect_policy(sync_state_set: Iterable[int], all_replicas: Iterable[int], old_master: int,
                 designated: int | None, live: LiveLookup) -> int | None:
    """RocketMQ's DefaultElectPolicy.

    Candidates are the SyncStateSet first, then (only when the caller passes them, i.e.
    ``enableElectUncleanMaster``) every replica.  Only live brokers count.  A live old
    master is kept unless another broker is designated; a designated broker wins only if
    it is a live candidate.  Otherwise the highest epoch wins, then the largest max
    offset, then the lowest ``brokerElectionPriority``; ties go to the lowest id so that
    every controller decides alike.
    """
    for candidates in (list(sync_state_set), list(all_replicas)):
        alive = {b: info for b in candidates if (info := live(b)) is not None}
        if not alive:
            continue
        if old_master in alive and (designated is None or designated == old_master):
            return old_master
        if designated is not None:
            if designated in alive:
                return designated
            continue
        return min(alive, key=lambda b: (-alive[b].epoch, -alive[b].max_offset, alive[b].priority, b))
    return None


class ControllerState:
    """All broker sets, keyed by broker name (as RocketMQ keys its replica tables)."""

    def __init__(self) -> None:
        self.sets: dict[str, BrokerSet] = {}
        self.applied_events = 0

    # ------------------------------------------------------------------ apply
    def apply(self, event: dict[str, Any]) -> bool:
        """Apply one committed event; False when its preconditions no longer hold (ignored everywhere)."""
        kind = event.get("type")
        name = str(event.get("name", ""))
        bs = self.sets.get(name)
        self.applied_events += 1
        if kind == "apply_broker_id":
            if bs is None:
                bs = self.sets[name] = BrokerSet(str(event["cluster"]), name)
            bid = int(event["broker_id"])
            old = bs.replicas.get(bid)
            if old is not None and old.check_code != event.get("check_code", ""):
                return False
            bs.replicas[bid] = ReplicaRecord(bid, check_code=str(event.get("check_code", "")),
                                             address=old.address if old else "")
            bs.next_id = max(bs.next_id, bid + 1)
            return True
        if bs is None:
            return False
        if kind == "update_address":
            rec = bs.replicas.get(int(event["broker_id"]))
            if rec is None:
                return False
            rec.address = str(event.get("address", rec.address))
            rec.ha_address = str(event.get("ha_address", rec.ha_address))
            rec.grpc_address = str(event.get("grpc_address", rec.grpc_address))
            return True
        if kind == "elect_master":
            if int(event["prev_epoch"]) != bs.master_epoch:
                return False
            new = int(event["new_master"])
            if new == NO_MASTER:
                bs.master_id = NO_MASTER  # keep the epoch: the next master gets a new one
                return True
            bs.master_id = new
            bs.master_epoch += 1
            bs.sync_state_set = tuple(sorted(int(b) for b in event["sync_state_set"]))
            bs.sync_state_set_epoch += 1
            return True
        if kind == "alter_sync_state_set":
            if (int(event["prev_epoch"]) != bs.sync_state_set_epoch
                    or int(event["master_epoch"]) != bs.master_epoch):
                return False
            bs.sync_state_set = tuple(sorted(int(b) for b in event["sync_state_set"]))
            bs.sync_state_set_epoch += 1
            return True
        if kind == "clean_broker_data":
            ids = [int(b) for b in event.get("broker_ids", [])]
            if not ids:
                del self.sets[name]
                return True
            for b in ids:
                bs.replicas.pop(b, None)
            bs.sync_state_set = tuple(b for b in bs.sync_state_set if b not in ids)
            if bs.master_id in ids:
                bs.master_id = NO_MASTER
            return True
        return False

    # ---------------------------------------------------------------- decide
    def next_broker_id(self, name: str) -> int:
        bs = self.sets.get(name)
        return FIRST_BROKER_ID if bs is None else bs.next_id

    def decide_apply_broker_id(self, cluster: str, name: str, broker_id: int, check_code: str) -> Decision:
        """Accepted if the set is new and the id is the first one, or the id is unused, or it is ours already."""
        bs = self.sets.get(name)
        event = {"type": "apply_broker_id", "cluster": cluster, "name": name, "broker_id": broker_id,
                 "check_code": check_code}
        if broker_id < FIRST_BROKER_ID:
            return Decision(Code.CONTROLLER_BROKER_ID_INVALID, f"broker id {broker_id} < {FIRST_BROKER_ID}")
        if bs is None:
            if broker_id != FIRST_BROKER_ID:
                return Decision(Code.CONTROLLER_BROKER_ID_INVALID,
                                f"broker set {name} is new: the first id is {FIRST_BROKER_ID}, not {broker_id}")
            return Decision(Code.SUCCESS, events=[event])
        rec = bs.replicas.get(broker_id)
        if rec is None:
            return Decision(Code.SUCCESS, events=[event])
        if rec.check_code == check_code:
            return Decision(Code.SUCCESS)
        return Decision(Code.CONTROLLER_BROKER_ID_INVALID,
                        f"broker id {broker_id} of {name} belongs to another broker ({rec.check_code})")

    def decide_register(self, name: str, broker_id: int, address: str, ha_address: str,
                        grpc_address: str) -> Decision:
        bs = self.sets.get(name)
        if bs is None or broker_id not in bs.replicas:
            return Decision(Code.CONTROLLER_BROKER_METADATA_NOT_EXIST,
                            f"broker {name}#{broker_id} has no id from this controller: apply for one first")
        rec = bs.replicas[broker_id]
        if (rec.address, rec.ha_address, rec.grpc_address) == (address, ha_address, grpc_address):
            return Decision(Code.SUCCESS)
        return Decision(Code.SUCCESS, events=[{"type": "update_address", "name": name, "broker_id": broker_id,
                                               "address": address, "ha_address": ha_address,
                                               "grpc_address": grpc_address}])

    def decide_alter_sync_state_set(self, name: str, master_id: int, master_epoch: int, new_set: Iterable[int],
                                    set_epoch: int, alive: Callable[[int], bool]) -> Decision:
        bs = self.sets.get(name)
        members = tuple(sorted(set(new_set)))
        if bs is None:
            return Decision(Code.CONTROLLER_BROKER_METADATA_NOT_EXIST, f"broker set {name} is unknown")
        if members == bs.sync_state_set:
            return Decision(Code.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED, "the SyncStateSet is unchanged")
        if master_id != bs.master_id:
            return Decision(Code.CONTROLLER_INVALID_MASTER,
                            f"broker {master_id} is not the master of {name} (master: {bs.master_id})")
        if master_epoch != bs.master_epoch:
            return Decision(Code.CONTROLLER_FENCED_MASTER_EPOCH,
                            f"master epoch {master_epoch} is stale (current {bs.master_epoch})")
        if set_epoch != bs.sync_state_set_epoch:
            return Decision(Code.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH,
                            f"SyncStateSet epoch {set_epoch} is stale (current {bs.sync_state_set_epoch})")
        unknown = [b for b in members if b not in bs.replicas]
        if unknown:
            return Decision(Code.CONTROLLER_INVALID_REPLICAS, f"brokers {unknown} are not replicas of {name}")
        dead = [b for b in members if b != master_id and not alive(b)]
        if dead:
            return Decision(Code.CONTROLLER_BROKER_NOT_ALIVE, f"brokers {dead} are not alive")
        if master_id not in members:
            return Decision(Code.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED,
                            "the SyncStateSet must contain the master")
        return Decision(Code.SUCCESS, events=[{"type": "alter_sync_state_set", "name": name,
                                               "prev_epoch": set_epoch, "master_epoch": master_epoch,
                                               "sync_state_set": list(members)}])

    def decide_elect(self, name: str, broker_id: int, designate: bool, live: LiveLookup,
                     unclean: bool) -> Decision:
        """ElectMaster (RIM.electMaster): ``broker_id`` -1 means the controller (or an operator) asks."""
        bs = self.sets.get(name)
        if bs is None:
            return Decision(Code.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED, f"broker set {name} is unknown")
        if designate and broker_id not in bs.replicas:
            return Decision(Code.CONTROLLER_INVALID_REQUEST, f"broker {broker_id} is not a replica of {name}")
        if bs.master_epoch == 0 and broker_id in bs.replicas and not designate:
            new: int | None = broker_id  # the first election of a set: the first broker to ask wins
        else:
            designated = broker_id if designate else None
            new = elect_policy(bs.sync_state_set, bs.replicas if unclean else (), bs.master_id, designated, live)
        if new is not None and new == bs.master_id:
            return Decision(Code.CONTROLLER_MASTER_STILL_EXIST, f"broker {new} is still the master of {name}",
                            broker_id=new)
        if new is not None:
            return Decision(Code.SUCCESS, f"broker {new} elected master of {name} (epoch {bs.master_epoch + 1})",
                            events=[{"type": "elect_master", "name": name, "prev_epoch": bs.master_epoch,
                                     "new_master": new, "sync_state_set": [new],
                                     "unclean": new not in bs.sync_state_set and bs.master_epoch > 0}],
                            broker_id=new)
        if broker_id == NO_MASTER and bs.master_id != NO_MASTER:
            return Decision(Code.CONTROLLER_MASTER_NOT_AVAILABLE,
                            f"no live broker of {name}'s SyncStateSet {list(bs.sync_state_set)} can be master"
                            + ("" if unclean else " (enableElectUncleanMaster=false)"),
                            events=[{"type": "elect_master", "name": name, "prev_epoch": bs.master_epoch,
                                     "new_master": NO_MASTER, "sync_state_set": list(bs.sync_state_set)}])
        return Decision(Code.CONTROLLER_ELECT_MASTER_FAILED,
                        f"no live broker of {name}'s SyncStateSet {list(bs.sync_state_set)} can be master"
                        + ("" if unclean else " (enableElectUncleanMaster=false)"))

    def masters_to_reelect(self, alive: Callable[[str, int], bool]) -> list[str]:
        """Sets whose master is dead (or missing) while some replica lives: the leader's backstop scan."""
        out = []
        for name, bs in sorted(self.sets.items()):
            if bs.master_epoch == 0:
                continue  # never had a master: its brokers ask for the first election themselves
            if (bs.master_id == NO_MASTER or not alive(name, bs.master_id)) and any(
                    alive(name, b) for b in bs.replicas):
                out.append(name)
        return out

    # ------------------------------------------------------------- encoding
    def snapshot(self) -> dict[str, Any]:
        """The whole state as plain data (status pages, tests comparing replicas)."""
        return {n: {"cluster": b.cluster, "masterId": b.master_id, "masterEpoch": b.master_epoch,
                    "syncStateSet": list(b.sync_state_set), "syncStateSetEpoch": b.sync_state_set_epoch,
                    "nextId": b.next_id,
                    "replicas": {str(r.broker_id): [r.address, r.ha_address, r.grpc_address, r.check_code]
                                 for r in b.replicas.values()}}
                for n, b in sorted(self.sets.items())}


def encode_event(event: dict[str, Any]) -> bytes:
    return json.dumps(event, separators=(",", ":"), sort_keys=True).encode()


def decode_event(data: bytes) -> dict[str, Any]:
    return json.loads(data)
