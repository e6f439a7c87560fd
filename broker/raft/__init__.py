"""The Raft consensus core shared by the DLedger commit log and the controller group.

A pure, deterministic state machine in the style of etcd's raft library: no I/O, no
clock, no threads, no asyncio.  See docs/RAFT.md for the API, the Ready contract, the
timing defaults and how the simulator in tests/sim/ checks it.
"""

from .config import RaftConfig, RaftConfigError
from .core import LeaderTransferring, NotLeader, ProposalDropped, RaftNode
from .log import RaftSafetyError
from .messages import ENTRY_OVERHEAD, Entry, EntryKind, HardState, Message, MsgType, Role, SoftState
from .ready import EventKind, RaftEvent, Ready
from .storage import MemoryStorage, Storage

__all__ = [
    "ENTRY_OVERHEAD",
    "Entry",
    "EntryKind",
    "EventKind",
    "HardState",
    "LeaderTransferring",
    "MemoryStorage",
    "Message",
    "MsgType",
    "NotLeader",
    "ProposalDropped",
    "RaftConfig",
    "RaftConfigError",
    "RaftEvent",
    "RaftNode",
    "RaftSafetyError",
    "Ready",
    "Role",
    "SoftState",
    "Storage",
]
