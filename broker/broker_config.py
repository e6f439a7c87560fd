"""The broker's configuration keys: RocketMQ's names and defaults, one doc line each.

Where RocketMQ's broker and 5.x proxy disagree on a key's home we follow the proxy for
client-facing gRPC settings (grpcServerPort, the invisible-time bounds) because that is
the process RocketMQ 5 clients actually talk to.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

from rocketscope.config import Key, Settings, load_settings, non_negative, port, positive
from rocketscope.names import TRACE_TOPIC

from .controller.config import BROKER_CONTROLLER_KEYS
from .remoting.config import BROKER_REMOTING_KEYS, REMOTING_KEYS
from .security.config import SECURITY_KEYS
from .telemetry_keys import TELEMETRY_KEYS

GiB = 1 << 30
ROLES = ("ASYNC_MASTER", "SYNC_MASTER", "SLAVE")

BROKER_KEYS: list[Key] = [
    Key("brokerClusterName", str, "DefaultCluster", "cluster this broker belongs to"),
    Key("brokerName", str, "broker-a", "broker group name (master and slaves share it)"),
    Key("brokerId", int, 0, "0 for the master, >0 for a slave", check=non_negative),
    Key("brokerRole", str, "ASYNC_MASTER", "ASYNC_MASTER, SYNC_MASTER or SLAVE", choices=ROLES),
    Key("namesrvAddr", str, "", "name servers, `host:port;host:port` (default: env NAMESRV_ADDR)"),
    Key("brokerIP1", str, "127.0.0.1", "address this broker advertises to clients and the name server"),
    Key("brokerIP2", str, "", "address a master advertises for its HA port (RocketMQ's key; default: brokerIP1)"),
    Key("bindAddress", str, "", "address the client (grpcServerPort) and admin (listenPort) listeners bind "
        "(RocketMQ's key); default: brokerIP1 only, `0.0.0.0` for every interface"),
    Key("haBindAddress", str, "", "address the HA and Raft listeners bind (RocketScope); default: brokerIP2 for the "
        "HA port and this member's host in dLegerPeers for the Raft port, `0.0.0.0` for every interface"),
    Key("grpcServerPort", int, 8081, "client-facing RocketMQ 5 gRPC port (the proxy's key)", check=port),
    Key("listenPort", int, 10911, "internal gRPC port: admin and broker-to-broker traffic", check=port),
    Key("haListenPort", int, 0, "port of the replication service; 0 means listenPort + 1 (an ephemeral port when "
        "listenPort is 0 too)", check=port),
    Key("haMasterAddress", str, "", "a slave's master HA address (default: learned from the name server)"),
    Key("haSendHeartbeatInterval", int, 200, "ms between the HA master's heartbeats to an idle slave, each "
        "answered by the slave's report (RocketMQ: 5000, the slave's heartbeat)", check=positive),
    Key("inSyncReplicas", int, 2, "copies (master included) a SYNC_MASTER waits for; RocketMQ 5 defaults to 1, "
        "which waits for nobody", check=positive),
    Key("slaveTimeout", int, 3000, "ms a SYNC_MASTER send waits for slaves before FLUSH_SLAVE_TIMEOUT",
        check=positive),
    Key("haEventAckIntervalMillis", int, 100, "ms between replica-ack events of one replica (throttle)",
        check=positive),
    Key("haEventCommitIntervalMillis", int, 100, "ms between commit_advanced events of one node (throttle: at most "
        "1000/this a second; the newest of an interval is written when it ends and keeps the others' offsets and "
        "times in its steps; they are counted in rocketmq_ha_events_throttled_total)", check=positive),
    Key("enableDLegerCommitLog", bool, False, "replicate the commit log with Raft (DLedger mode)"),
    Key("dLegerGroup", str, "", "Raft group name (default: brokerName)"),
    Key("dLegerPeers", str, "", "members, `n0-host:port;n1-host:port;n2-host:port` (Raft ports)"),
    Key("dLegerSelfId", str, "", "this member's id in dLegerPeers"),
    Key("preferredLeaderId", str, "", "member that takes leadership back when it is healthy and caught up"),
    Key("dLegerTickMillis", int, 50, "Raft tick length, ms (RocketScope; DLedger has no tick)", check=positive),
    Key("dLegerHeartbeatTicks", int, 2, "ticks between leader heartbeats", check=positive),
    Key("dLegerElectionTicksMin", int, 6, "shortest election timeout, ticks (300 ms by default: sub-second "
        "failover; DLedger's own defaults take 6 s)", check=positive),
    Key("dLegerElectionTicksMax", int, 12, "longest election timeout, ticks", check=positive),
    Key("maxWaitAckTimeMs", int, 2500, "ms a DLedger send waits to be committed at a majority", check=positive),
    Key("dLegerSyncAppends", bool, True, "true: a member fsyncs the entries it appends before they count toward "
        "the commit (Raft as written: an acknowledged send survives a power cut of the whole group); false: "
        "appends count once written to the page cache and the log is fsynced every dLegerFlushIntervalMillis in "
        "the background, as Apache DLedger (flushFileInterval) and JetStream do: a killed process loses nothing, a "
        "power cut of a majority at once can lose acknowledged sends (RocketScope; docs/RAFT.md)"),
    Key("dLegerFlushIntervalMillis", int, 10, "ms between background fsyncs of the Raft log when dLegerSyncAppends "
        "is false (Apache DLedger's flushFileInterval: 10)", check=positive),
    Key("storePathRootDir", str, "~/store", "root directory of the store (`~` expands to the home directory)"),
    Key("flushDiskType", str, "ASYNC_FLUSH",
        "SYNC_FLUSH acknowledges after fsync; ASYNC_FLUSH flushes in the background",
        choices=("SYNC_FLUSH", "ASYNC_FLUSH")),
    Key("syncFlushTimeout", int, 5000, "ms a SYNC_FLUSH send waits for fsync before FLUSH_DISK_TIMEOUT",
        check=positive),
    Key("flushIntervalCommitLog", int, 500, "ms between background flushes (ASYNC_FLUSH)", check=positive),
    Key("mappedFileSizeCommitLog", int, GiB, "bytes per commit-log segment file", check=positive),
    Key("mappedFileSizeConsumeQueue", int, 300_000 * 20, "bytes per consume-queue file (multiple of 20)",
        check=lambda v: None if v > 0 and v % 20 == 0 else "must be a positive multiple of 20"),
    Key("maxHashSlotNum", int, 500_000, "hash slots per index file", check=positive),
    Key("maxIndexNum", int, 2_000_000, "entries per index file", check=positive),
    Key("maxMessageSize", int, 4 * 1024 * 1024, "largest message body accepted, bytes (lowered at start, with a log "
        "line, to what fits one commit-log segment: mappedFileSizeCommitLog minus 64 KiB, or minus half of it for "
        "segments under 128 KiB, for the record's header and properties)", check=positive),
    Key("fileReservedTime", float, 72.0, "hours a commit-log file is kept", check=non_negative),
    Key("deleteWhen", str, "04", "hours (`;`-separated) when expired files are deleted"),
    Key("diskMaxUsedSpaceRatio", int, 75, "disk usage percent above which the oldest files are deleted at once",
        check=lambda v: None if 1 <= v <= 100 else "must be a percentage"),
    Key("cleanResourceInterval", int, 10000, "ms between retention checks", check=positive),
    Key("autoCreateTopicEnable", bool, True, "create a topic on first route query or send"),
    Key("autoCreateSubscriptionGroup", bool, True, "create a consumer group on first use"),
    Key("enablePropertyFilter", bool, False, "serve SQL92 subscriptions to pulls (remoting PULL_MESSAGE and gRPC "
        "PullMessage); false refuses them, as RocketMQ. ReceiveMessage (POP) evaluates SQL92 either way, as Apache "
        "RocketMQ 5.3.3 does (broker/filter/)"),
    Key("sendMessageQueueSelection", str, "PROXY", "queue of a gRPC SendMessage: `PROXY` picks it as Apache "
        "RocketMQ's proxy does (a FIFO message group's consistent hash over the write queues, otherwise round "
        "robin) and ignores the client's system_properties.queue_id; `CLIENT` stores the message in the queue the "
        "client chose (RocketScope)", choices=("PROXY", "CLIENT")),
    Key("priorityOrderAsc", bool, True, "priority messages (topic message.type PRIORITY, broker/priority.py): true, "
        "a larger priority is more urgent and a POP reads the topic's queues from the highest id down; false, the "
        "lowest first. A message of priority p is stored in queue min(p, writeQueueNums - 1) either way (Apache "
        "RocketMQ 5.4's key)"),
    Key("popFromRetryProbabilityForPriority", int, 0, "percent of POPs of a PRIORITY topic that read the group's "
        "retry topic before the topic's queues (otherwise after them, when the batch is not full); Apache RocketMQ "
        "5.4's key", check=lambda v: None if 0 <= v <= 100 else "must be a percentage"),
    Key("enableLmq", bool, False, "Lite mode (broker/lite.py): light message queues `%LMQ%$<topic>$<liteTopic>`; "
        "with enableMultiDispatch, a lite message of a LITE topic is also indexed in its lite topic's queue, which "
        "the group's LitePushConsumers read. Off (Apache RocketMQ 5.5's default): a lite message is stored in its "
        "topic only and a subscribed lite consumer receives nothing. On, pulls and offset commits of any `%LMQ%` "
        "queue (queue 0) are served, as Apache's LmqTopicConfigManager does (docs/STORAGE.md)"),
    Key("enableMultiDispatch", bool, False, "with enableLmq: index a record in the LMQ queues its property "
        "INNER_MULTI_DISPATCH names (one commit-log record, extra consume-queue entries; broker/store/"
        "multi_dispatch.py); Apache RocketMQ's key, default false"),
    Key("maxLmqConsumeQueueNum", int, 20000, "most LMQ queues (lite topics) a broker holds: a lite message that "
        "would open one more is refused with LITE_TOPIC_QUOTA_EXCEEDED (Apache's store key)", check=positive),
    Key("maxLiteTopicSize", int, 64, "longest lite topic in bytes (UTF-8): longer ones are refused with "
        "ILLEGAL_LITE_TOPIC; a LITE_PUSH_CONSUMER's Settings carry it as max_lite_topic_size (Apache's proxy key)",
        check=positive),
    Key("maxSyncLiteSubscriptionRate", int, 5000, "SyncLiteSubscription PARTIAL_ADDs per second this broker takes "
        "from all clients together (a smooth token bucket holding up to one second of permits); past it "
        "TOO_MANY_REQUESTS (Apache's proxy key)", check=positive),
    Key("maxLiteSubscriptionCount", int, 100000, "most (client, lite topic) subscriptions this broker holds: a "
        "PARTIAL_ADD past it is refused with LITE_SUBSCRIPTION_QUOTA_EXCEEDED (Apache's broker key)", check=positive),
    Key("liteTtlCheckInterval", int, 120000, "ms between scans for expired lite topics (a LITE topic's attribute "
        "lite.topic.expiration, minutes: a lite topic without a new message for that long has its queue cleared "
        "and its subscriptions removed; broker/lite_expiry.py; Apache's key)", check=positive),
    Key("minLiteTTl", int, 900000, "ms: no lite topic expires sooner than this after its last message, and none "
        "in the first this-many ms after the broker started (Apache's key and spelling)", check=non_negative),
    Key("liteSubscriptionCheckInterval", int, 120000, "ms between checks for lite subscriptions of clients gone "
        "without a word (Apache's key)", check=positive),
    Key("liteSubscriptionCheckTimeoutMills", int, 180000, "ms without a SyncLiteSubscription after which a client's "
        "lite subscriptions are dropped (a LitePushConsumer syncs every 30 s; Apache's key)", check=positive),
    Key("defaultTopicQueueNums", int, 8, "queues of an auto-created topic", check=positive),
    Key("brokerPermission", int, 6, "6 read-write, 4 read-only, 2 write-only",
        check=lambda v: None if v in (2, 4, 6) else "must be 2, 4 or 6"),
    Key("registerNameServerPeriod", int, 30000, "ms between registrations with the name servers",
        check=lambda v: None if 1000 <= v <= 60000 else "must be between 1000 and 60000"),
    Key("minInvisibleTimeMillsForRecv", int, 10000, "smallest invisible duration a receive may ask for, ms",
        check=positive),
    Key("defaultInvisibleTimeMills", int, 60_000, "invisible duration of a push consumer's (auto-renew) receive, ms",
        check=positive),
    Key("maxInvisibleTimeMills", int, 12 * 3600 * 1000, "largest invisible duration, ms", check=positive),
    Key("grpcClientConsumerMaxLongPollingTimeoutMillis", int, 20000, "cap on a receive's long polling, ms",
        check=positive),
    Key("consumerOffsetFlushInterval", int, 1000, "ms between consumer-offset persistence", check=positive),
    Key("consumerOffsetReplicateInterval", int, 100, "ms between records of changed consumer offsets in the "
        "replicated log (DLedger and controller mode), so a new leader or master redelivers little; 0: off, "
        "replicas then copy offsets every few seconds (RocketScope; broker/offset_log.py)", check=non_negative),
    Key("popStateReplicate", bool, True, "hand-outs and acks go through the log (RMQ_SYS_POP_STATE), replicated in "
        "DLedger, controller and Master/Slave mode, and an ack is answered once written (replicated), so neither a "
        "restart nor a new leader or master hands out an acknowledged message again; false: that state stays in "
        "the writer's memory and a restart forgets the acks above each committed offset (RocketScope; "
        "broker/pop_log.py)"),
    Key("popStateSnapshotInterval", int, 1000, "ms between snapshots of the replicated POP state (a restarted "
        "node replays the log from the last one; RocketScope; broker/pop_log.py)", check=positive),
    Key("transactionTimeOut", int, 6000, "ms a half message waits before its first check-back", check=positive),
    Key("transactionCheckMax", int, 15, "check-backs before an unresolved half message is discarded",
        check=positive),
    Key("transactionCheckInterval", int, 30000, "ms between check-backs of one half message", check=positive),
    Key("timerMaxDelaySec", int, 3 * 24 * 3600, "largest delay a message may ask for, seconds", check=positive),
    Key("timerWheelEnable", bool, True, "accept delayed messages (5.x delivery time, remoting DELAY level) into the "
        "disk-backed timer wheel; false refuses them naming this key (broker/timer.py)"),
    Key("timerPrecisionMs", int, 1000, "width of one timer-wheel slot, ms; the wheel holds 604800 slots "
        "(7 days at 1000 ms). Changing it rebuilds the timer index from the timer topic",
        check=lambda v: None if 10 <= v <= 60_000 else "must be 10 to 60000"),
    Key("timerRollWindowSlot", int, 2 * 24 * 3600, "slots ahead a delayed message is placed at most; a longer "
        "delay is written again into the timer topic when the window reaches it (roll)",
        check=lambda v: None if 0 < v < 7 * 24 * 3600 else "must be 1 to 604799 (the wheel's slots)"),
    Key("timerFlushIntervalMs", int, 1000, "ms between syncs of the timer log, wheel and checkpoint",
        check=positive),
    Key("timerProgressReplicateIntervalMs", int, 1000, "ms between the writer's delivery-progress records in the "
        "timer topic, so a new writer after a failover re-checks little (RocketScope)", check=positive),
    Key("traceTopicEnable", bool, False, "create the trace topic on this broker"),
    Key("msgTraceTopicName", str, TRACE_TOPIC, "name of the trace topic"),
    Key("traceOn", bool, True, "tell clients to write trace records (TRACE_ON)"),
    Key("regionId", str, "DefaultRegion", "region written into trace records (MSG_REGION)"),
    Key("brokerTraceEnable", bool, False, "the broker writes trace records itself (RocketScope)"),
    Key("brokerTraceQueueSize", int, 100_000, "trace records the broker buffers between writes; beyond it they "
        "are dropped and counted in rocketscope_trace_records_dropped_total", check=positive),
    Key("traceStore", str, "local", "where trace records are kept for lookup: local (the trace topic and its index) "
        "or elasticsearch (also bulk-indexed there)",
        check=lambda v: None if v.lower() in ("local", "elasticsearch") else "expected local or elasticsearch"),
    Key("traceElasticsearchHosts", str, "", "Elasticsearch URLs for traceStore=elasticsearch, comma-separated"),
    Key("traceElasticsearchUsername", str, "", "Elasticsearch basic-auth user (with traceElasticsearchPassword)"),
    Key("traceElasticsearchPassword", str, "", "Elasticsearch basic-auth password"),
    Key("traceElasticsearchApiKey", str, "", "Elasticsearch API key (instead of user and password)"),
    Key("traceElasticsearchIndexPrefix", str, "rocketscope-trace", "daily indices <prefix>-YYYY.MM.DD"),
]

BROKER_KEYS += SECURITY_KEYS
BROKER_KEYS += BROKER_CONTROLLER_KEYS
BROKER_KEYS += REMOTING_KEYS + BROKER_REMOTING_KEYS




def load_broker_config(raw: Mapping[str, str]) -> Settings:
    settings = load_settings(BROKER_KEYS, raw, extra_known=TELEMETRY_KEYS, what="broker")
    if not settings.namesrvAddr:
        settings.set("namesrvAddr", os.environ.get("NAMESRV_ADDR", ""))
    if settings.brokerRole == "SLAVE" and settings.brokerId == 0:
        from rocketscope.config import ConfigError

        raise ConfigError("config key brokerId has bad value '0': a SLAVE needs brokerId > 0")
    _check_distinct_ports(settings)
    _fit_message_size(settings)
    return settings


RECORD_ROOM = 64 * 1024  # a record's header, topic and properties (at most 32767 bytes of them) besides the body


def _fit_message_size(settings: Settings) -> None:
    """A record never spans two commit-log segments: a body that cannot fit one was accepted by the
    writer's checks and then failed every replica's append (a DLedger follower's apply loop died on
    it). RocketMQ's segments (1 GiB) dwarf its 4 MiB maxMessageSize; small test segments do not.
    The store refuses a record that does not fit all the same (message_store.py)."""
    segment = settings.mappedFileSizeCommitLog
    fits = segment - min(RECORD_ROOM, segment // 2)  # tiny test segments: half for the body
    if settings.maxMessageSize > fits:
        logging.getLogger(__name__).info(
            "maxMessageSize %d lowered to %d: a record must fit one commit-log segment (mappedFileSizeCommitLog %d)",
            settings.maxMessageSize, fits, segment)
        settings.set("maxMessageSize", fits)


def implied_ha_port(settings: Settings) -> int:
    """``haListenPort``, or what its 0 means: ``listenPort + 1`` (Apache RocketMQ's default), or an ephemeral port
    (0) when ``listenPort`` is itself ephemeral.  Why the last: ``0 + 1`` made every such broker (the tests' in-process
    brokers) listen for replication on the fixed port 1, and two of them at once collided."""
    if settings.haListenPort:
        return settings.haListenPort
    return settings.listenPort + 1 if settings.listenPort else 0


def _check_distinct_ports(settings: Settings) -> None:
    """Two listeners on one port would not fail to bind (see grpc_options.py): refuse the config instead."""
    from rocketscope.config import ConfigError

    ports = {"grpcServerPort": settings.grpcServerPort, "listenPort": settings.listenPort,
             "haListenPort": implied_ha_port(settings),
             "remotingListenPort": settings.remotingListenPort}
    seen: dict[int, str] = {}
    for key, value in ports.items():
        if value and value in seen:
            implied = " (haListenPort 0 means listenPort + 1)" if key == "haListenPort" and not settings.haListenPort \
                else ""
            raise ConfigError(f"config key {key} has bad value '{value}': the same port as {seen[value]}{implied}")
        seen[value] = key


def namesrv_addresses(settings: Settings) -> list[str]:
    return [a.strip() for a in str(settings.namesrvAddr).split(";") if a.strip()]
