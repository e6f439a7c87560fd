"""Controller-mode keys: the controller process's (ControllerConfig) and the broker's.

Names are RocketMQ's (reference §3.1, §3.2); so are the defaults except the timing keys.
The Raft timing keys are RocketScope's: the controller group runs on the shared Raft core
with a tick, like DLedger mode, and defaults to a sub-second controller-leader failover.
The broker-liveness keys default to a sub-second master failover too (issue 15: with
RocketMQ's 1 s heartbeats, 10 s timeout and 5 s scans a killed master was replaced after
~11 s): heartbeats every 200 ms, dead after 800 ms (four missed heartbeats, the same
margin as Raft's election timeout over its heartbeat), scans every 100 ms, so a dead
master is seen within 0.9 s.  docs/CONTROLLER.md ("Timing") gives RocketMQ's values for a
WAN or a slow, overloaded host.
"""

from __future__ import annotations

from collections.abc import Mapping

from rocketscope.config import ConfigError, Key, Settings, load_settings, non_negative, port, positive

SCAN_MS = 100  # scanNotActiveBrokerInterval and scanInactiveMasterInterval (the embedded controller too)

CONTROLLER_KEYS: list[Key] = [
    Key("listenPort", int, 9878, "port of the controller's client gRPC service (brokers' controllerAddr)",
        check=port),
    Key("listenHost", str, "0.0.0.0", "address to bind"),
    Key("controllerType", str, "DLedger", "Raft implementation; only DLedger (the shared Raft core) is built in",
        choices=("DLEDGER",)),
    Key("controllerDLegerGroup", str, "", "name of the controller Raft group"),
    Key("brokerClusterName", str, "DefaultCluster", "the `cluster` label of this controller's metrics (a controller "
        "may serve several clusters; per-cluster series also carry broker_cluster)"),
    Key("controllerDLegerPeers", str, "", "members, `n0-host:port;n1-host:port;n2-host:port` (Raft ports)"),
    Key("controllerDLegerSelfId", str, "", "this controller's id in controllerDLegerPeers"),
    Key("controllerStorePath", str, "~/DLedgerController", "directory of the controller's Raft log and state "
        "(`~` expands)"),
    Key("controllerAdvertisedAddr", str, "", "client address other controllers hand out as the leader's "
        "(default: 127.0.0.1:listenPort; RocketScope)"),
    Key("mappedFileSize", int, 1 << 30, "accepted for compatibility; the controller log is one small file",
        check=positive),
    Key("scanNotActiveBrokerInterval", int, SCAN_MS, "ms between scans for brokers whose heartbeat timed out "
        "(RocketMQ: 5000)", check=positive),
    Key("scanInactiveMasterInterval", int, SCAN_MS, "ms between the leader's scans for sets with a dead master "
        "(RocketMQ: 5000)", check=positive),
    Key("electMasterMaxRetryCount", int, 3, "attempts of one controller-triggered election", check=positive),
    Key("enableElectUncleanMaster", bool, False, "elect a broker outside the SyncStateSet when no member is "
        "alive (may lose acknowledged messages)"),
    Key("notifyBrokerRoleChanged", bool, True, "tell every live member of a set about a new master at once"),
    Key("isProcessReadEvent", bool, False, "replicate reads through Raft (linearizable, slower); RocketScope "
        "answers reads from the leader once its term's first entry is applied"),
    Key("controllerThreadPoolNums", int, 16, "accepted for compatibility (asyncio: one event loop)",
        check=positive),
    Key("controllerRequestThreadPoolQueueCapacity", int, 50000, "accepted for compatibility", check=positive),
    Key("controllerTickMillis", int, 50, "Raft tick length, ms (RocketScope)", check=positive),
    Key("controllerHeartbeatTicks", int, 2, "ticks between Raft leader heartbeats (RocketScope)", check=positive),
    Key("controllerElectionTicksMin", int, 6, "shortest Raft election timeout, ticks (RocketScope)",
        check=positive),
    Key("controllerElectionTicksMax", int, 12, "longest Raft election timeout, ticks (RocketScope)",
        check=positive),
]

# Keys the name server accepts when it embeds a controller.
EMBEDDED_KEYS: list[Key] = [
    Key("enableControllerInNamesrv", bool, False, "run a controller inside this name server (its client "
        "service shares the name server's port; the controller keys go in the name server's file)"),
    *[k for k in CONTROLLER_KEYS if k.name not in ("listenPort", "listenHost", "scanNotActiveBrokerInterval")],
]

BROKER_CONTROLLER_KEYS: list[Key] = [
    Key("enableControllerMode", bool, False, "master and slaves chosen by the controller group (RIP-44)"),
    Key("controllerAddr", str, "", "controllers' client addresses, `host:port;host:port`"),
    Key("fetchControllerAddrByDnsLookup", bool, False, "accepted for compatibility; not supported",
        check=lambda v: "DNS lookup of controllers is not supported" if v else None),
    Key("syncBrokerMetadataPeriod", int, 1000, "ms between GetReplicaInfo polls (RocketMQ: 5000)", check=positive),
    Key("checkSyncStateSetPeriod", int, 500, "ms between the master's SyncStateSet shrink/expand checks "
        "(RocketMQ: 5000)", check=positive),
    Key("syncControllerMetadataPeriod", int, 10000, "ms between looks for the controller leader", check=positive),
    Key("controllerHeartBeatTimeoutMills", int, 800, "ms without a heartbeat after which the controller "
        "treats this broker as dead (RocketMQ: 10000; keep it >= 3x brokerHeartbeatInterval)", check=positive),
    Key("brokerHeartbeatInterval", int, 200, "ms between heartbeats to every controller (RocketMQ: 1000)",
        check=positive),
    Key("sendHeartbeatTimeoutMillis", int, 300, "heartbeat RPC timeout, ms (RocketMQ: 1000)", check=positive),
    Key("brokerElectionPriority", int, 2**31 - 1, "lower is preferred when epoch and offset tie",
        check=non_negative),
    Key("haMaxTimeSlaveNotCatchup", int, 3000, "ms a SyncStateSet member may stay behind before the master "
        "removes it (RocketMQ: 15000)", check=positive),
    Key("haHousekeepingInterval", int, 1000, "ms without any report from a SyncStateSet member (a paused or cut "
        "off slave keeps its TCP connection) after which the master removes it, even when it is not behind; keep "
        "it >= 3x haSendHeartbeatInterval (RocketMQ: 20000, the HA connection's idle limit)", check=positive),
    Key("allAckInSyncStateSet", bool, False, "a send needs every SyncStateSet member's ack (inSyncReplicas is "
        "then ignored)"),
    Key("minInSyncReplicas", int, 1, "fewer SyncStateSet members than this: sends fail at once "
        "(IN_SYNC_REPLICAS_NOT_ENOUGH)", check=positive),
    Key("storePathEpochFile", str, "", "epoch file (default: <storePathRootDir>/epochFileCheckpoint)"),
    Key("storePathBrokerIdentity", str, "", "controller-issued id (default: <storePathRootDir>/brokerIdentity)"),
    Key("readUnCommitted", bool, False, "let consumers of the master read past the confirm offset"),
    Key("slaveReadEnable", bool, False, "a master serves pulls of data far behind its log end through an in-sync "
        "slave (Master/Slave and controller mode); in Master/Slave mode a slave also serves ReceiveMessage (POP) "
        "while its master is down, as broker 0 read-only, and hands its progress back when the master returns "
        "(broker/slave_read.py, docs/CONTROLLER.md)"),
    Key("slaveReadBehindBytes", int, 0, "bytes behind the log end that count as far behind for slaveReadEnable; "
        "0 = accessMessageInMemoryMaxRatio percent of physical memory (RocketScope)", check=non_negative),
    Key("accessMessageInMemoryMaxRatio", int, 40, "percent of memory beyond which a consumer counts as far "
        "behind (slaveReadEnable)", check=lambda v: None if 1 <= v <= 100 else "must be a percentage"),
]


def parse_peers(text: str, key: str = "controllerDLegerPeers") -> dict[str, str]:
    """``n0-host:port;n1-host:port`` → {id: address}."""
    peers: dict[str, str] = {}
    for item in filter(None, (p.strip() for p in text.split(";"))):
        pid, sep, addr = item.partition("-")
        if not sep or ":" not in addr:
            raise ConfigError(f"config key {key} has bad item {item!r}: expected id-host:port")
        peers[pid] = addr
    return peers


def check_raft_keys(s: Settings) -> None:
    peers = parse_peers(s.controllerDLegerPeers)
    if not peers:
        raise ConfigError("config key controllerDLegerPeers is empty: list the controllers as "
                          "n0-host:port;n1-host:port;n2-host:port")
    if s.controllerDLegerSelfId not in peers:
        raise ConfigError(f"config key controllerDLegerSelfId has bad value {s.controllerDLegerSelfId!r}: "
                          f"not one of controllerDLegerPeers ({', '.join(peers)})")


def load_controller_config(raw: Mapping[str, str]) -> Settings:
    from rocketscope.broker.security.config import TLS_KEYS
    from rocketscope.broker.telemetry_keys import TELEMETRY_KEYS

    settings = load_settings([*CONTROLLER_KEYS, *TLS_KEYS], raw, extra_known=TELEMETRY_KEYS, what="controller")
    check_raft_keys(settings)
    if not settings.controllerDLegerGroup:
        settings.set("controllerDLegerGroup", "DefaultControllerGroup")
    return settings


def controller_addresses(text: str) -> list[str]:
    return [a.strip() for a in text.split(";") if a.strip()]
