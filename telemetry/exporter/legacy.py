"""The legacy rocketmq-exporter names, derived from the series nodes push to us.

Why: existing Grafana boards and alert rules query the gauges of Apache's rocketmq-exporter. We
serve the key ones, computed from our own series, so those boards keep working during a migration.
Each definition is in ``LEGACY_DOC`` (rendered into docs/METRICS.md). The ``*_tps`` values are
per-second rates between a node's last two collections (rocketmq-exporter used the broker's
per-minute stats). As in rocketmq-exporter, ``broker`` is the brokerName (the ``broker_group`` label
of the node's ``rocketmq_ha_role``) and ``brokerIP`` the broker's address (that series'
``broker_addr``, brokerIP1:listenPort), unless the node sets a ``broker_ip`` attribute (for example
``metricsLabel=broker_ip:10.0.0.5``). The members of one broker group report the same offsets
(replicas), so offsets take the largest of them; rates add up.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from prometheus_client.core import GaugeMetricFamily, Metric

from .store import NodeKey, Series

LEGACY_DOC: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("rocketmq_broker_tps", ("cluster", "brokerIP", "broker"),
     "per broker node: per-second increase of `rocketmq_messages_in_total` summed over all its series;"
     " broker is the brokerName, brokerIP the node's address (brokerIP1:listenPort), both from its"
     " `rocketmq_ha_role` series"),
    ("rocketmq_producer_tps", ("cluster", "broker", "topic"),
     "per broker and topic: per-second increase of `rocketmq_messages_in_total`"),
    ("rocketmq_consumer_tps", ("cluster", "broker", "topic", "group"),
     "per broker, topic and consumer group: per-second increase of `rocketmq_messages_out_total`"),
    ("rocketmq_producer_offset", ("cluster", "broker", "topic"),
     "`rocketmq_topic_max_offset` (sum of the topic's queue max offsets on the broker; the largest over the"
     " members of the broker group)"),
    ("rocketmq_consumer_offset", ("cluster", "broker", "topic", "group"),
     "`rocketmq_consumer_committed_offset` (sum of the group's committed offsets on the broker; the largest"
     " over the members of the broker group)"),
    ("rocketmq_group_diff", ("group", "topic", "countOfOnlineConsumers", "msgModel"),
     "sum over brokers of `rocketmq_consumer_lag_messages{is_retry=false}`; countOfOnlineConsumers is the"
     " largest per-broker sum of `rocketmq_consumer_connections` of the group; msgModel is always CLUSTERING"
     " (RocketScope's POP consumption has no broadcasting)"),
)

_HELP = {name: doc.replace("`", "") for name, _, doc in LEGACY_DOC}
_LABELS = {name: labels for name, labels, _ in LEGACY_DOC}


def _broker(key: NodeKey) -> bool:
    return key[1] == "broker"


def families(snapshot: Iterable[tuple[NodeKey, Series]]) -> list[Metric]:
    sums: dict[str, dict[tuple[str, ...], float]] = {name: defaultdict(float) for name in _LABELS}
    lag: dict[tuple[str, str], float] = defaultdict(float)
    online: dict[tuple[str, NodeKey], float] = defaultdict(float)
    node_tps: dict[tuple[str, NodeKey], float] = defaultdict(float)  # keyed by node until broker_ip is known
    broker_ip: dict[NodeKey, str] = {}
    broker_addr: dict[NodeKey, str] = {}
    broker_name: dict[NodeKey, str] = {}
    offsets: dict[str, dict[tuple[str, ...], dict[NodeKey, float]]] = {
        "rocketmq_producer_offset": defaultdict(dict), "rocketmq_consumer_offset": defaultdict(dict)}
    items = list(snapshot)
    for key, series in items:  # the node's identity first: every later row is keyed by brokerName
        attrs = series.point.attributes
        if "broker_ip" in attrs:
            broker_ip[key] = str(attrs["broker_ip"])
        if series.point.name == "rocketmq_ha_role":
            broker_name[key] = str(attrs.get("broker_group", "")) or key[2]
            broker_addr[key] = str(attrs.get("broker_addr", ""))
    for key, series in items:
        point = series.point
        attrs = point.attributes
        if not _broker(key):
            continue
        cluster = key[0]
        broker = broker_name.get(key, key[2])
        topic = str(attrs.get("topic", ""))
        group = str(attrs.get("consumer_group", ""))
        if point.name == "rocketmq_messages_in_total":
            rate = series.rate()
            if rate is not None:
                node_tps[(cluster, key)] += rate
                sums["rocketmq_producer_tps"][(cluster, broker, topic)] += rate
        elif point.name == "rocketmq_messages_out_total":
            rate = series.rate()
            if rate is not None:
                sums["rocketmq_consumer_tps"][(cluster, broker, topic, group)] += rate
        elif point.name == "rocketmq_topic_max_offset":
            offsets["rocketmq_producer_offset"][(cluster, broker, topic)][key] = point.value
        elif point.name == "rocketmq_consumer_committed_offset":
            offsets["rocketmq_consumer_offset"][(cluster, broker, topic, group)][key] = point.value
        elif point.name == "rocketmq_consumer_lag_messages" and attrs.get("is_retry") in (False, "false"):
            lag[(group, topic)] += point.value
        elif point.name == "rocketmq_consumer_connections":
            online[(group, key)] += point.value
    # broker tps: resolve the node key into (cluster, brokerIP, broker) now that broker_ip is known
    for (c, k), rate in node_tps.items():
        sums["rocketmq_broker_tps"][(c, broker_ip.get(k) or broker_addr.get(k, ""), broker_name.get(k, k[2]))] += rate
    for name, per_labels in offsets.items():
        for labels, per_node in per_labels.items():
            sums[name][labels] = max(per_node.values())
    consumers: dict[str, float] = defaultdict(float)
    for (group, _node), count in online.items():
        consumers[group] = max(consumers[group], count)
    for (group, topic), value in lag.items():
        sums["rocketmq_group_diff"][(group, topic, str(int(consumers.get(group, 0))), "CLUSTERING")] += value
    out: list[Metric] = []
    for name, rows in sums.items():
        if not rows:
            continue
        family = GaugeMetricFamily(name, _HELP[name], labels=list(_LABELS[name]))
        for labels, value in rows.items():
            family.add_metric(list(labels), value)
        out.append(family)
    return out
