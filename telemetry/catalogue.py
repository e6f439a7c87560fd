"""The one declarative list of every instrument RocketScope emits.

Why a catalogue: names, units, label keys and bucket layouts are a contract with
dashboards and alert rules (ours in deploy/, and RocketMQ's that users already run).
Declaring them once lets the meter provider build its views from the list, lets the
Prometheus renderer and the exporter name series identically, and lets
``docs/METRICS.md`` be generated (``python -m rocketscope.telemetry.catalogue --markdown``)
and checked by a test, so the documentation can never drift from the code.

Units are true OpenTelemetry (UCUM) units: ``By`` bytes, ``ms``, ``s``, ``1`` for counters and ratios.
Gauges of counts (lag, connections, roles, offsets) carry no unit, as in Apache RocketMQ: the
OpenTelemetry-to-Prometheus translation of a Collector or of Prometheus 3 appends ``_ratio`` to a
gauge with unit ``1`` (rocketmq_consumer_lag_messages_ratio), which would empty every alert and
panel in Push mode (tests/test_otel_collector_e2e.py compares the names with PROM mode).
Where RocketMQ declares a wrong unit (finish-message latency recorded in seconds but
declared ms, DLedger and controller latencies recorded in microseconds) we record in the
unit we declare. The Prometheus series name follows the OpenTelemetry compatibility rules
(unit suffix, ``_total`` on counters), except where RocketMQ's own exposition name differs
(it set no unit on its byte counters): ``prom_name`` keeps RocketMQ's name there.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from .naming import prometheus_name


class Kind(StrEnum):
    """Instrument kinds, named as in the OpenTelemetry API."""

    COUNTER = "counter"
    UP_DOWN_COUNTER = "up_down_counter"
    HISTOGRAM = "histogram"
    OBSERVABLE_GAUGE = "observable_gauge"
    OBSERVABLE_COUNTER = "observable_counter"

    @property
    def observable(self) -> bool:
        return self in (Kind.OBSERVABLE_GAUGE, Kind.OBSERVABLE_COUNTER)

    @property
    def prometheus_type(self) -> str:
        if self in (Kind.COUNTER, Kind.OBSERVABLE_COUNTER):
            return "counter"
        if self is Kind.HISTOGRAM:
            return "histogram"
        return "gauge"


@dataclass(frozen=True)
class Instrument:
    """One instrument: what a component asks for by name."""

    name: str
    kind: Kind
    unit: str
    description: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] | None = None
    group: str = "broker"
    origin: str = "rocketmq"  # rocketmq: same name/labels as Apache RocketMQ; rocketscope: our addition
    prom_name: str | None = None  # only where RocketMQ's exposition name differs from the OTel rule
    opt_in: str | None = None  # config key that must be true for the instrument to be emitted
    emitted_by: str = "node"  # node: our telemetry; client: official clients push it, broker re-exports

    @property
    def prometheus_name(self) -> str:
        """The series family name on /metrics (without _bucket/_count/_sum suffixes)."""
        if self.prom_name:
            return self.prom_name
        return prometheus_name(self.name, self.unit, self.kind.prometheus_type)


# ----------------------------------------------------------------------------------------
# label sets (Apache RocketMQ 5's, docs/METRICS.md)
_IN = ("topic", "message_type", "is_system")
_OUT = ("topic", "consumer_group", "is_system", "is_retry")
_LAG = ("consumer_group", "topic", "is_retry", "is_system")
_QLAG = ("consumer_group", "topic", "queue_id", "is_retry", "is_system")
_STORE = ("storage_type", "storage_medium")
_DLEDGER = ("group", "self_id")

# bucket layouts (Apache RocketMQ 5's), converted to the unit we record in
KIB = 1024.0
MIB = 1024.0 * 1024.0
MESSAGE_SIZE_BUCKETS = (1 * KIB, 4 * KIB, 512 * KIB, 1 * MIB, 2 * MIB, 4 * MIB)
RPC_LATENCY_BUCKETS = (1.0, 3.0, 5.0, 7.0, 10.0, 100.0, 1000.0, 2000.0, 3000.0)
FINISH_LATENCY_BUCKETS = (5.0, 60.0, 600.0, 3600.0, 43200.0, 86400.0)
CREATE_TIME_BUCKETS = (10.0, 100.0, 1000.0, 3000.0, 5000.0)
DELAY_LATENCY_BUCKETS = (60.0, 600.0, 3600.0, 43200.0, 86400.0, 259200.0)
# RocketMQ's controller layout (1 us .. 10 s, 22 bounds) expressed in ms
CONTROLLER_LATENCY_BUCKETS = (
    0.001, 0.003, 0.005, 0.01, 0.03, 0.05, 0.1, 0.3, 0.5,
    1.0, 3.0, 5.0, 10.0, 30.0, 50.0, 100.0, 300.0, 500.0,
    1000.0, 3000.0, 5000.0, 10000.0,
)  # fmt: skip
# DLedger's layout: the controller's plus 2 ms (23 bounds), in ms
DLEDGER_LATENCY_BUCKETS = tuple(sorted((*CONTROLLER_LATENCY_BUCKETS, 2.0)))
SEND_COST_BUCKETS = (1.0, 5.0, 10.0, 20.0, 50.0, 200.0, 500.0)
AWAIT_TIME_BUCKETS = (1.0, 5.0, 20.0, 100.0, 1000.0, 5000.0, 10000.0)
LOOP_LAG_BUCKETS = (1.0, 5.0, 10.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 3000.0)
PROCESS_TIME_BUCKETS = (1.0, 5.0, 10.0, 100.0, 1000.0, 10000.0, 60000.0)

C, U, H, G, OC = Kind.COUNTER, Kind.UP_DOWN_COUNTER, Kind.HISTOGRAM, Kind.OBSERVABLE_GAUGE, Kind.OBSERVABLE_COUNTER
ROLE_DOC = "0 unknown, 1 candidate, 2 follower/slave, 3 leader/master"
HA_ROLE_DOC = ("3 master (the DLedger leader, the controller-elected master or a master/slave pair's master), "
               "2 slave (a follower), 1 candidate (a DLedger member in an election), 0 unknown; the same numbering "
               "as dledger_role, so a broker group whose maximum is below 3 has no master")

PER_QUEUE_LAG_KEY = "metricsPerQueueLag"

CATALOGUE: tuple[Instrument, ...] = (
    # --- broker stats (RocketMQ 4.1)
    Instrument("rocketmq_processor_watermark", G, "", "RocketMQ: queue length of each request thread pool. Not "
               "emitted: RocketScope serves requests on one asyncio loop, with no thread pool queues; "
               "rocketmq_rpc_latency shows the waiting.", ("processor",)),
    Instrument("rocketmq_broker_permission", G, "", "Broker permission bits (6 = read and write)."),
    Instrument("rocketmq_topic_number", G, "", "Topics configured on this broker (sum across brokers double-counts)."),
    Instrument("rocketmq_consumer_group_number", G, "", "Subscription groups configured on this broker."),
    # --- requests (4.2): retry and DLQ topics are not counted
    Instrument("rocketmq_messages_in_total", C, "1", "Messages stored (retry and DLQ topics excluded).", _IN),
    Instrument("rocketmq_messages_out_total", C, "1", "Messages delivered to consumers (retry/DLQ excluded).", _OUT),
    Instrument("rocketmq_throughput_in_total", C, "By", "Bytes stored (retry and DLQ topics excluded).", _IN,
               prom_name="rocketmq_throughput_in_total"),
    Instrument("rocketmq_throughput_out_total", C, "By", "Bytes delivered to consumers.", _OUT,
               prom_name="rocketmq_throughput_out_total"),
    Instrument("rocketmq_message_size", H, "By", "Size of each stored message.", _IN, MESSAGE_SIZE_BUCKETS,
               prom_name="rocketmq_message_size"),
    Instrument("rocketmq_topic_create_execution_time", H, "ms", "Time to create a topic on this broker (admin "
               "updateTopic, auto-creation, or a slave copying the master's topics): validation and persisting "
               "the topic table.",
               ("invocation_status", "is_system"), CREATE_TIME_BUCKETS),
    Instrument("rocketmq_consumer_group_create_execution_time", H, "ms", "Time to create a subscription group on "
               "this broker (admin updateSubGroup, auto-creation on first receive or pull, a slave's copy).",
               ("invocation_status",), CREATE_TIME_BUCKETS),
    # --- connections (4.3)
    Instrument("rocketmq_producer_connections", G, "", "Producer connections.",
               ("language", "version", "protocol_type")),
    Instrument("rocketmq_consumer_connections", G, "", "Consumer connections.",
               ("consumer_group", "language", "version", "consume_mode", "protocol_type", "is_system")),
    # --- lag and DLQ (4.4), summed over the topic's queues
    Instrument("rocketmq_consumer_lag_messages", G, "", "Messages not yet acknowledged by the group.", _LAG),
    Instrument("rocketmq_consumer_lag_latency", G, "ms", "Age of the oldest unacknowledged message.", _LAG),
    Instrument("rocketmq_consumer_inflight_messages", G, "", "Messages delivered but not yet acknowledged.", _LAG),
    Instrument("rocketmq_consumer_queueing_latency", G, "ms", "Age of the oldest message not yet delivered.", _LAG),
    Instrument("rocketmq_consumer_ready_messages", G, "", "Messages ready to be delivered.", _LAG),
    Instrument("rocketmq_send_to_dlq_messages_total", C, "1", "Messages moved to the group's DLQ.",
               ("consumer_group", "topic", "is_system")),
    # per-queue lag: ours, opt-in (rocketmq-exporter issue #190); separate names so sums never double-count
    Instrument("rocketmq_consumer_queue_lag_messages", G, "", "Per-queue lag in messages (opt-in).", _QLAG,
               origin="rocketscope", opt_in=PER_QUEUE_LAG_KEY),
    Instrument("rocketmq_consumer_queue_lag_latency", G, "ms", "Per-queue age of oldest unacknowledged message.",
               _QLAG, origin="rocketscope", opt_in=PER_QUEUE_LAG_KEY),
    # offsets, ours: what the legacy rocketmq_producer_offset / rocketmq_consumer_offset derive from
    Instrument("rocketmq_topic_max_offset", G, "", "Sum of the topic's queue max offsets on this broker.",
               ("topic",), origin="rocketscope"),
    Instrument("rocketmq_consumer_committed_offset", G, "", "Sum of the group's committed offsets on the topic.",
               ("consumer_group", "topic"), origin="rocketscope"),
    # --- transactions (4.5)
    Instrument("rocketmq_commit_messages_total", C, "1", "Transactional messages committed.", ("topic",)),
    Instrument("rocketmq_rollback_messages_total", C, "1", "Transactional messages rolled back.", ("topic",)),
    Instrument("rocketmq_finish_message_latency", H, "s", "Half message to commit or rollback.", ("topic",),
               FINISH_LATENCY_BUCKETS),
    Instrument("rocketmq_half_messages", G, "", "Half messages awaiting commit or rollback.", ("topic",)),
    # --- RPC (4.6); protocol_type=remoting or grpc (ours: the 5.x gRPC services)
    Instrument("rocketmq_rpc_latency", H, "ms",
               "Request handling time; protocol_type=grpc carries the gRPC method in request_code.",
               ("protocol_type", "request_code", "response_code", "is_long_polling", "result"), RPC_LATENCY_BUCKETS),
    # --- store (4.7)
    Instrument("rocketmq_storage_size", G, "By", "Bytes used on the store's file system.", _STORE),
    Instrument("rocketmq_storage_flush_behind_bytes", G, "By", "Bytes written but not yet flushed.", _STORE),
    Instrument("rocketmq_storage_dispatch_behind_bytes", G, "By", "Bytes not yet dispatched to queues.", _STORE),
    Instrument("rocketmq_storage_message_reserve_time", G, "ms", "Age of the oldest stored message.", _STORE),
    Instrument("rocketmq_storage_disk_usage_ratio", G, "1", "Used fraction (0..1) of the store's file system.",
               _STORE, origin="rocketscope"),
    Instrument("rocketmq_timing_messages", G, "", "Delay messages waiting to be delivered.", ("topic",)),
    # timer wheel (4.7, broker/timer.py): the enqueue indexes the timer topic, the dequeue delivers what is due
    Instrument("rocketmq_timer_enqueue_lag", G, "", "Timer-topic records not yet indexed into the timer wheel.",
               _STORE),
    Instrument("rocketmq_timer_enqueue_latency", G, "ms", "Age of the oldest timer-topic record not yet indexed.",
               _STORE),
    Instrument("rocketmq_timer_dequeue_lag", G, "", "Delay messages due but not yet delivered (writer only).",
               _STORE),
    Instrument("rocketmq_timer_dequeue_latency", G, "ms",
               "How late the oldest due, undelivered delay message is (writer only).", _STORE),
    Instrument("rocketmq_timer_enqueue_total", C, "1", "Delay messages indexed into the timer wheel.",
               ("topic", *_STORE)),
    Instrument("rocketmq_timer_dequeue_total", C, "1", "Delay messages delivered to their real topic.",
               ("topic", *_STORE)),
    Instrument("rocketmq_timer_message_snapshot", G, "",
               "Timer-wheel units due within each bound from now (timer_bound_s 5 .. 86400, each bucket after the "
               "previous bound), refreshed at most every 5 s.", ("timer_bound_s", *_STORE)),
    Instrument("rocketmq_delay_message_latency", H, "s", "Delivery time minus born time of delay messages.",
               ("topic",), DELAY_LATENCY_BUCKETS),
    # --- client metrics (6.1): pushed by the official clients, accepted and re-exported by the broker
    Instrument("rocketmq_send_cost_time", H, "ms", "Client: send start to result.",
               ("topic", "client_id", "invocation_status"), SEND_COST_BUCKETS, group="client", emitted_by="client"),
    Instrument("rocketmq_delivery_latency", H, "ms", "Client: server delivery to client receipt.",
               ("topic", "client_id", "consumer_group"), SEND_COST_BUCKETS, group="client", emitted_by="client"),
    Instrument("rocketmq_await_time", H, "ms", "Client: time a message waits before the listener runs.",
               ("topic", "client_id", "consumer_group"), AWAIT_TIME_BUCKETS, group="client", emitted_by="client"),
    Instrument("rocketmq_process_time", H, "ms", "Client: listener run time.",
               ("topic", "client_id", "consumer_group", "invocation_status"), PROCESS_TIME_BUCKETS,
               group="client", emitted_by="client"),
    # --- master/slave and controller-mode HA (ours)
    Instrument("rocketmq_ha_role", G, "", f"Replication role of this broker: {HA_ROLE_DOC}. broker_addr is "
               "the broker's internal address (brokerIP1:listenPort).", ("broker_group", "broker_addr"),
               group="ha", origin="rocketscope"),
    Instrument("rocketmq_ha_replica_ack_offset", G, "By", "Commit-log offset acknowledged by each replica.",
               ("broker_group", "replica"), group="ha", origin="rocketscope"),
    Instrument("rocketmq_ha_replication_lag_bytes", G, "By", "Master max offset minus the replica's ack offset.",
               ("broker_group", "replica"), group="ha", origin="rocketscope"),
    Instrument("rocketmq_ha_sync_state_set_size", G, "",
               "Replicas in the SyncStateSet (master included); controller mode, written by the master.",
               ("broker_group",), group="ha", origin="rocketscope"),
    Instrument("rocketmq_ha_master_epoch", G, "", "Current master epoch of the broker group; controller mode, "
               "written by the master.", ("broker_group",),
               group="ha", origin="rocketscope"),
    Instrument("rocketmq_ha_events_throttled_total", C, "1", "Replication events (replica_ack, commit_advanced) "
               "not written as their own message: a newer one of the same throttle interval carries their offset "
               "and time in its steps (haEventAckIntervalMillis, haEventCommitIntervalMillis).",
               ("broker_group", "event_type"),
               group="ha", origin="rocketscope"),
    # --- DLedger (ours; names of the DLedger library, values in the declared unit)
    Instrument("dledger_role", G, "", f"Raft role: {ROLE_DOC}.", _DLEDGER, group="dledger", origin="rocketscope"),
    Instrument("dledger_term", G, "", "Current Raft term.", _DLEDGER, group="dledger", origin="rocketscope"),
    Instrument("dledger_commit_index", G, "", "Highest committed log index.", _DLEDGER, group="dledger",
               origin="rocketscope"),
    Instrument("dledger_peer_lag_entries", G, "", "Leader's last index minus the peer's match index.",
               (*_DLEDGER, "remote_id"), group="dledger", origin="rocketscope"),
    Instrument("dledger_append_entry_latency", H, "ms", "Leader: from proposing an entry (the send) until it "
               "is committed at a majority, the time a send waits for replication.", _DLEDGER,
               DLEDGER_LATENCY_BUCKETS, group="dledger", origin="rocketscope"),
    Instrument("dledger_replicate_entry_latency", H, "ms", "Leader: from proposing an entry until "
               "this peer's acknowledgement covering it reached the leader (one observation per entry and peer).",
               (*_DLEDGER, "remote_id"), DLEDGER_LATENCY_BUCKETS, group="dledger", origin="rocketscope"),
    Instrument("dledger_election_total", C, "1", "Elections this node started, by result (won, lost).",
               (*_DLEDGER, "election_result"), group="dledger", origin="rocketscope"),
    # --- controller (RocketMQ 4.11 names, prefixed so they cannot collide in Prometheus)
    Instrument("rocketmq_controller_role", U, "", f"Controller Raft role: {ROLE_DOC}.", group="controller"),
    Instrument("rocketmq_controller_request_total", C, "1", "Controller requests by type and status.",
               ("request_type", "request_handle_status"), group="controller"),
    Instrument("rocketmq_controller_request_latency", H, "ms", "Controller request handling time.",
               ("request_type",), CONTROLLER_LATENCY_BUCKETS, group="controller"),
    Instrument("rocketmq_controller_election_total", C, "1",
               "Master elections (new_master_elected, keep_current_master, no_master_elected).",
               ("broker_cluster", "broker_set", "election_result"), group="controller"),
    Instrument("rocketmq_controller_active_broker_num", G, "", "Brokers alive in each broker set.",
               ("broker_cluster", "broker_set"), group="controller"),
    Instrument("rocketmq_controller_term", G, "", "Current Raft term of this controller.", group="controller",
               origin="rocketscope"),
    Instrument("rocketmq_controller_sync_state_set_size", G, "", "SyncStateSet members of each broker set.",
               ("broker_cluster", "broker_set"), group="controller", origin="rocketscope"),
    # --- name server (ours)
    Instrument("rocketmq_namesrv_registered_brokers", G, "", "Brokers currently registered, per broker "
               "cluster (broker_cluster; filter on it, not on the name server's own cluster label).",
               ("broker_cluster",),
               group="namesrv", origin="rocketscope"),
    Instrument("rocketmq_namesrv_registered_topics", G, "", "Topics with a route.", group="namesrv",
               origin="rocketscope"),
    Instrument("rocketmq_namesrv_route_queries_total", C, "1", "Route queries by result (found, not_found).",
               ("result",), group="namesrv", origin="rocketscope"),
    Instrument("rocketmq_namesrv_broker_expired_total", C, "1", "Brokers removed after missed heartbeats.",
               ("broker_cluster",), group="namesrv", origin="rocketscope"),
    # --- ACL (ours)
    Instrument("rocketmq_acl_denied_total", C, "1", "Requests denied (reason: signature, permission, ip, account).",
               ("resource_type", "action", "reason"), group="security", origin="rocketscope"),
    # --- trace pipeline (ours): every drop counted, failures recorded
    Instrument("rocketscope_trace_records_written_total", C, "1", "Trace records written to the trace store.",
               ("source",), group="trace", origin="rocketscope"),
    Instrument("rocketscope_trace_records_dropped_total", C, "1", "Trace records dropped (queue_full, shutdown).",
               ("source", "reason"), group="trace", origin="rocketscope"),
    Instrument("rocketscope_trace_records_failed_total", C, "1", "Trace records whose write failed.",
               ("source",), group="trace", origin="rocketscope"),
    Instrument("rocketscope_trace_queue_depth", G, "", "Trace records waiting in the dispatcher queue.",
               ("source",), group="trace", origin="rocketscope"),
    # --- the process itself (ours)
    Instrument("rocketscope_event_loop_lag", H, "ms", "How late the process's event loop (broker, controller) woke "
               "up for a timer due every 100 ms (broker/loop_lag.py): what every Raft heartbeat, HA heartbeat and "
               "reply waited on top of its own work. Hundreds of ms mean a starved or blocked process (elections "
               "follow at 300 ms).",
               (), LOOP_LAG_BUCKETS, origin="rocketscope"),
    # --- telemetry itself (ours)
    Instrument("rocketscope_metrics_overflow_total", C, "1",
               "Measurements folded into an instrument's overflow series (otel_metric_overflow=true) "
               "because it reached metricsOtelCardinalityLimit.",
               ("metric",), group="telemetry", origin="rocketscope"),
)  # fmt: skip

BY_NAME: dict[str, Instrument] = {i.name: i for i in CATALOGUE}
BASE_LABELS = ("cluster", "node_type", "node_id")


def get(name: str) -> Instrument:
    """The catalogue entry for ``name``; a KeyError that says where to add a missing one."""
    try:
        return BY_NAME[name]
    except KeyError:
        raise KeyError(f"instrument {name!r} is not in the catalogue: declare it in telemetry/catalogue.py") from None


def _fmt_bucket(bound: float) -> str:
    return str(int(bound)) if float(bound).is_integer() else repr(bound)


def markdown(instruments: Iterable[Instrument] = CATALOGUE) -> str:
    """docs/METRICS.md: one table per group, generated so that it cannot drift."""
    groups: dict[str, list[Instrument]] = {}
    for inst in instruments:
        groups.setdefault(inst.group, []).append(inst)
    out = [
        "# RocketScope metrics",
        "",
        "Generated by `python -m rocketscope.telemetry.catalogue --markdown > docs/METRICS.md`"
        " from telemetry/catalogue.py; a test fails when this file differs. Do not edit by hand.",
        "",
        "Every data point also carries `cluster`, `node_type` and `node_id`, the pairs of `metricsLabel`,"
        " and `aggregation=delta` when `metricsInDelta=true` pushes delta temporality over OTLP.",
        "Units are OpenTelemetry units (`By` bytes, `ms`, `s`, `1` counters and ratios; none on gauges of counts:"
        " a unit `1` gauge gains `_ratio` behind a Collector, docs/PUSH.md). The Prometheus column is the"
        " series name on `/metrics` (PROM mode and `rocketscope exporter`); histograms add `_bucket`, `_count`"
        " and `_sum`. Origin `rocketmq` means Apache RocketMQ's name and labels; `rocketscope` is ours.",
        "`node_id` names one process for its whole life: `<brokerName>-<brokerId>` (master/slave),"
        " `<brokerName>-<dLegerSelfId>` (DLedger), `<brokerName>@<brokerIP1>:<listenPort>` (controller mode,"
        " where the controller assigns ids after start), `namesrv-<port>`, `controller-<selfId>`."
        " `cluster` is the node's brokerClusterName. A name server can serve several clusters: its own"
        " `cluster` label is the `brokerClusterName` of its config (default `DefaultCluster`, the cluster that"
        " brokers with default settings join), and its per-cluster facts carry the broker cluster in"
        " `broker_cluster`. Roles (`rocketmq_ha_role`, `dledger_role`, `rocketmq_controller_role`) share one"
        " numbering: 3 master/leader, 2 slave/follower, 1 candidate, 0 unknown.",
        "A series past `metricsOtelCardinalityLimit` label sets of one instrument is folded into one"
        " series labelled `otel_metric_overflow=\"true\"` and counted in `rocketscope_metrics_overflow_total`.",
        "",
    ]
    for group, items in groups.items():
        out += [f"## {group}", ""]
        out += ["| name | kind | unit | Prometheus | labels | buckets | origin | description |",
                "|---|---|---|---|---|---|---|---|"]
        for i in items:
            buckets = ", ".join(_fmt_bucket(b) for b in i.buckets) if i.buckets else ""
            origin = i.origin + (f", opt-in `{i.opt_in}`" if i.opt_in else "")
            if i.emitted_by == "client":
                origin += ", pushed by clients"
            labels = ", ".join(i.labels)
            out.append(f"| `{i.name}` | {i.kind.value} | `{i.unit}` | `{i.prometheus_name}` | {labels} | {buckets} "
                       f"| {origin} | {i.description} |")
        out.append("")
    from .config import keys_table  # late imports: keep `import catalogue` light
    from .exporter.legacy import LEGACY_DOC

    out += ["## legacy rocketmq-exporter names (served by `rocketscope exporter` only)", "",
            "`rocketscope exporter` keeps every pushing node's series apart (by cluster, node_type, node_id),"
            " adds delta pushes up into cumulative series (the `aggregation=delta` label stays, so the series"
            " of a delta node remain distinguishable) and drops a node 3 push intervals after its last push"
            " (at least 60 s, so that a node's last push is scraped at least once at Prometheus' default"
            " interval even when its last pushes were flushes a moment apart; 5 min until its interval is"
            " known). It also serves these rocketmq-exporter"
            " gauges, computed from the pushed series:", ""]
    out += ["| name | labels | derived from |", "|---|---|---|"]
    for name, legacy_labels, doc in LEGACY_DOC:
        out.append(f"| `{name}` | {', '.join(legacy_labels)} | {doc} |")
    out += ["", "## configuration keys", "", "Read from the node's properties file (RocketMQ's keys and defaults).", "",
            keys_table(), ""]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", action="store_true", help="print docs/METRICS.md")
    args = parser.parse_args(argv)
    if args.markdown:
        sys.stdout.write(markdown())
    else:
        for inst in CATALOGUE:
            print(inst.name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
