"""mqadmin's maintenance commands (issue 21) for `rocketscope admin`, with mqadmin's names and short flags.

Mounted on the ``admin`` group by rocketscope/admin_cli.py. Each command asks the brokers (their
BrokerAdmin gRPC service, broker/admin_service.py and broker/admin_ops.py) or the name servers
(NamesrvAdmin, broker/namesrv/admin.py) and prints a table, or JSON with ``--json``.
Commands exit 0 on success, 1 when a broker or name server refused (its message printed), 2 on
a connection error; mqadmin's own exit code is 0 either way.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import click

from rocketscope.broker.protocol import admin_pb2, common_pb2
from rocketscope.config import parse_bool as config_bool
from rocketscope.names import DLQ_PREFIX, RETRY_PREFIX

from . import remoting_client as rc
from .admin_cli import MSG_HEADERS, _message_rows, emit, json_opt, ms, namesrv_opt, run
from .admin_client import AdminClient, AdminError
from .admin_stats import GROUP_GET_NUMS, TOPIC_PUT_NUMS, BrokerCounters, Counter


def parse_timestamp(text: str) -> int:
    """mqadmin's -s forms: ``now``, milliseconds since the epoch, or ``yyyy-MM-dd#HH:mm:ss:SSS`` (local time)."""
    text = text.strip()
    if text == "now":
        return int(time.time() * 1000)
    if text.isdigit():
        return int(text)
    try:
        day, _, clock = text.partition("#")
        hms, _, millis = clock.rpartition(":") if clock.count(":") == 3 else (clock, "", "0")
        t = time.mktime(time.strptime(f"{day} {hms}", "%Y-%m-%d %H:%M:%S"))
        return int(t * 1000) + int(millis or 0)
    except ValueError:
        raise click.BadParameter(f"{text!r}: expected now, milliseconds or yyyy-MM-dd#HH:mm:ss:SSS",
                                 param_hint="-s") from None


def parse_bool(text: str, flag: str) -> bool:
    """mqadmin's boolean options take a value (``-f false``), not a bare flag."""
    try:
        return config_bool(text)
    except ValueError:
        raise click.BadParameter(f"{text!r}: expected true or false", param_hint=flag) from None


async def route_masters(c: AdminClient, topic: str) -> list[tuple[str, str]]:
    """(broker name, internal address of its master) of every broker serving ``topic``."""
    resp = await c.route(topic)
    if resp.status.code:
        raise AdminError(resp.status.remark or f"topic {topic} has no route")
    out = []
    for bd in resp.route.broker_datas:
        addr = bd.broker_addrs.get(0) or next(iter(sorted(bd.broker_addrs.items())), (0, ""))[1]
        if addr:
            out.append((bd.broker_name, addr))
    return sorted(out)


async def pick_brokers(c: AdminClient, broker: str | None, cluster: str | None, slaves: bool = False
                       ) -> list[tuple[str, str]]:
    """(broker name, address) that -b / -c name: -b one broker, -c the masters of a cluster (every member
    with ``slaves``), neither: every master."""
    nodes = await c.cluster()
    if broker:
        return [next(((n.name, n.addr) for n in nodes if n.addr == broker), (broker, broker))]
    chosen = [(n.name, n.addr) for n in nodes if (cluster is None or n.cluster == cluster)
              and (slaves or n.broker_id == 0)]
    if not chosen:
        raise AdminError(f"no broker found{' in cluster ' + cluster if cluster else ''}")
    return sorted(chosen)


def refused(what: str, status: Any) -> bool:
    """Print a broker's refusal; True when it refused."""
    if status.code:
        click.echo(f"error: {what}: {status.remark} (code {status.code})", err=True)
        return True
    return False


# ------------------------------------------------------------------ offsets
@click.command("resetOffsetByTime")
@namesrv_opt
@click.option("-g", "--group", required=True, help="consumer group")
@click.option("-t", "--topic", required=True)
@click.option("-s", "--timestamp", "stamp", required=True, help="now | milliseconds | yyyy-MM-dd#HH:mm:ss:SSS")
@click.option("-f", "--force", "force_text", default="true", show_default=True,
              help="true: move offsets either way; false: only roll back")
@click.option("-b", "--broker", help="only this broker (internal address)")
@click.option("-c", "--cluster", help="only the brokers of this cluster")
@click.option("-q", "--queue", "queue_id", type=int, default=None, help="queue id (with -o)")
@click.option("-o", "--offset", "offset", type=int, default=None, help="set queue -q to this offset instead")
@json_opt
def reset_offset_by_time(namesrv: str | None, group: str, topic: str, stamp: str, force_text: str,
                         broker: str | None, cluster: str | None, queue_id: int | None, offset: int | None,
                         as_json: bool) -> None:
    """Move a consumer group's offsets on a topic to the first message stored at or after a time."""
    force = parse_bool(force_text, "-f")
    if (queue_id is None) != (offset is None):
        raise click.BadParameter("give -q and -o together", param_hint="-q/-o")
    ts = parse_timestamp(stamp) if offset is None else 0

    async def go(c: AdminClient) -> int:
        targets = await route_masters(c, topic)
        if broker:
            targets = [t for t in targets if t[1] == broker] or [(broker, broker)]
        if cluster:
            in_cluster = {n.name for n in await c.cluster() if n.cluster == cluster}
            targets = [t for t in targets if t[0] in in_cluster]
        rows, data, failed = [], [], 0
        for name, addr in targets:
            req = admin_pb2.ResetOffsetRequest(group=group, topic=topic, timestamp=ts, force=force)
            if offset is not None:
                req.offsets.add(group=group, topic=topic, queue_id=queue_id or 0, offset=offset)
            resp = await c.broker_call(addr, "ResetOffset", req)
            if refused(f"reset offsets on {addr}", resp.status):  # type: ignore[attr-defined]
                failed += 1
                continue
            for q in resp.queues:  # type: ignore[attr-defined]
                rows.append((name, q.queue_id, q.old_offset, q.new_offset))
                data.append(dict(brokerName=name, queueId=q.queue_id, oldOffset=q.old_offset, offset=q.new_offset))
        if not as_json:
            click.echo(f"rollback consumer offset by specified consumerGroup[{group}], topic[{topic}], "
                       f"force[{str(force).lower()}], timestamp(string)[{stamp}], timestamp(long)[{ts}]")
        emit(as_json, data, ("#brokerName", "#queueId", "#oldOffset", "#offset"), rows)
        return 1 if failed or not targets else 0
    run(go, namesrv)


@click.command("cloneGroupOffset")
@namesrv_opt
@click.option("-s", "--srcGroup", "src", required=True, help="source consumer group")
@click.option("-d", "--destGroup", "dest", required=True, help="destination consumer group")
@click.option("-t", "--topic", required=True)
@click.option("-o", "--offline", default="true",
              help="offline flag: accepted and ignored, as Apache 5.3.3's mqadmin defines it and never reads it")
def clone_group_offset(namesrv: str | None, src: str, dest: str, topic: str, offline: str) -> None:
    """Give a group the committed offsets another group has on a topic."""
    async def go(c: AdminClient) -> int:
        copied = 0
        for _, addr in await route_masters(c, topic):
            offsets = await c.broker_call(addr, "ConsumerOffsets", common_pb2.Empty())
            mine = [o for o in offsets.offsets if o.group == src and o.topic == topic]  # type: ignore[attr-defined]
            if not mine:
                continue
            req = admin_pb2.ResetOffsetRequest(group=dest, topic=topic, force=True)
            for o in mine:
                req.offsets.add(group=dest, topic=topic, queue_id=o.queue_id, offset=o.offset)
            resp = await c.broker_call(addr, "ResetOffset", req)
            if refused(f"clone offsets on {addr}", resp.status):  # type: ignore[attr-defined]
                return 1
            copied += len(resp.queues)  # type: ignore[attr-defined]
        if not copied:
            click.echo(f"error: group {src} has no committed offset on topic {topic}", err=True)
            return 1
        click.echo(f"clone group offset success. srcGroup[{src}], destGroup[{dest}], topic[{topic}] "
                   f"({copied} queues)")
        return 0
    run(go, namesrv)


# ------------------------------------------------------------------ groups and topics
@click.command("deleteSubGroup")
@namesrv_opt
@click.option("-g", "--groupName", "group", required=True)
@click.option("-b", "--brokerAddr", "broker")
@click.option("-c", "--clusterName", "cluster")
@click.option("-r", "--removeOffset", "remove_text", default="false", show_default=True,
              help="true: drop the group's committed offsets too")
def delete_sub_group(namesrv: str | None, group: str, broker: str | None, cluster: str | None,
                     remove_text: str) -> None:
    """Delete a consumer group from brokers, with its retry topic (and its offsets with -r true)."""
    remove = parse_bool(remove_text, "-r")

    async def go(c: AdminClient) -> int:
        failed = 0
        addrs = [a for _, a in await pick_brokers(c, broker, cluster)]
        for addr in addrs:
            st = await c.broker_call(addr, "DeleteSubGroup", admin_pb2.GroupRequest(group=group, remove_offset=remove))
            if refused(f"delete subscription group from {addr}", st):
                failed += 1
            else:
                click.echo(f"delete subscription group [{group}] from broker [{addr}] success.")
        retry = RETRY_PREFIX + group
        for addr in addrs:  # as mqadmin: the group's retry topic goes with it
            await c.broker_call(addr, "DeleteTopic", admin_pb2.TopicRequest(topic=retry))
        await c.delete_topic_in_namesrv(retry)
        return 1 if failed else 0
    run(go, namesrv)


@click.command("updateTopicPerm")
@namesrv_opt
@click.option("-t", "--topic", required=True)
@click.option("-p", "--perm", type=click.IntRange(2, 6), required=True, help="2 write, 4 read, 6 read-write")
@click.option("-b", "--brokerAddr", "broker")
@click.option("-c", "--clusterName", "cluster")
def update_topic_perm(namesrv: str | None, topic: str, perm: int, broker: str | None, cluster: str | None) -> None:
    """Change a topic's permission on brokers (its routes follow at the next registration, at once)."""
    if perm not in (2, 4, 6):
        raise click.BadParameter(f"{perm}: expected 2, 4 or 6", param_hint="-p")

    async def go(c: AdminClient) -> int:
        failed = 0
        if broker or cluster:
            targets = [a for _, a in await pick_brokers(c, broker, cluster)]
        else:
            targets = [a for _, a in await route_masters(c, topic)]
        for addr in targets:
            configs = await c.broker_call(addr, "GetTopicConfigs", common_pb2.Empty())
            cfg = next((t for t in configs.topics if t.topic_name == topic), None)  # type: ignore[attr-defined]
            if cfg is None:
                click.echo(f"error: topic {topic} does not exist on {addr}", err=True)
                failed += 1
                continue
            old = cfg.perm
            cfg.perm = perm
            st = await c.broker_call(addr, "UpdateTopic", admin_pb2.UpdateTopicRequest(config=cfg))
            if refused(f"update topic perm on {addr}", st):
                failed += 1
            else:
                click.echo(f"update topic perm from {old} to {perm} in {addr} success.")
        return 1 if failed or not targets else 0
    run(go, namesrv)


@click.command("topicStatus")
@namesrv_opt
@click.option("-t", "--topic", required=True)
@click.option("-c", "--cluster", help="only the brokers of this cluster")
@json_opt
def topic_status(namesrv: str | None, topic: str, cluster: str | None, as_json: bool) -> None:
    """Per queue of a topic: min and max offset and the store time of the newest message."""
    async def go(c: AdminClient) -> int:
        targets = await route_masters(c, topic)
        if cluster:
            names = {n.name for n in await c.cluster() if n.cluster == cluster}
            targets = [t for t in targets if t[0] in names]
        rows, data = [], []
        for name, addr in targets:
            resp = await c.broker_call(addr, "TopicStats", admin_pb2.TopicStatsRequest(topic=topic))
            if refused(f"topic status from {addr}", resp.status):  # type: ignore[attr-defined]
                return 1
            for q in resp.queues:  # type: ignore[attr-defined]
                rows.append((name, q.queue_id, q.min_offset, q.max_offset, ms(q.last_update_timestamp)))
                data.append(dict(brokerName=name, queueId=q.queue_id, minOffset=q.min_offset,
                                 maxOffset=q.max_offset, lastUpdateTimestamp=q.last_update_timestamp))
        emit(as_json, data, ("#Broker Name", "#QID", "#Min Offset", "#Max Offset", "#Last Updated"), rows)
        return 0
    run(go, namesrv)


@click.command("topicClusterList")
@namesrv_opt
@click.option("-t", "--topic", required=True)
@json_opt
def topic_cluster_list(namesrv: str | None, topic: str, as_json: bool) -> None:
    """The clusters a topic's brokers belong to."""
    async def go(c: AdminClient) -> int:
        resp = await c.route(topic)
        if refused(f"route of {topic}", resp.status):
            return 1
        by_name = {n.name: n.cluster for n in await c.cluster()}
        clusters = sorted({bd.cluster or by_name.get(bd.broker_name, "") for bd in resp.route.broker_datas} - {""})
        emit(as_json, clusters, ("#Cluster",), [(x,) for x in clusters])
        return 0
    run(go, namesrv)


# ------------------------------------------------------------------ connections
async def _show_connections(c: AdminClient, broker: str | None, method: str, request: Any, missing: str,
                            as_json: bool) -> int:
    """Ask each broker (slaves too) for its connections, one row per client id; ``missing`` when none."""
    conns: dict[str, tuple[str, Any]] = {}
    for _, addr in await pick_brokers(c, broker, None, slaves=True):
        resp = await c.broker_call(addr, method, request)
        for x in resp.connections:  # type: ignore[attr-defined]
            conns.setdefault(x.client_id, (addr, x))
    if not conns:
        click.echo(f"error: {missing}", err=True)
        return 1
    data = [dict(clientId=cid, clientAddr=x.address, language=x.language, version=x.version, type=x.client_type,
                 broker=addr) for cid, (addr, x) in sorted(conns.items())]
    rows = [(cid, x.address, x.language, x.version, addr) for cid, (addr, x) in sorted(conns.items())]
    emit(as_json, data, ("#ClientId", "#ClientAddr", "#Language", "#Version", "#Broker"), rows)
    return 0


@click.command("consumerConnection")
@namesrv_opt
@click.option("-g", "--consumerGroup", "group", required=True)
@click.option("-b", "--brokerAddr", "broker", help="ask only this broker")
@json_opt
def consumer_connection(namesrv: str | None, group: str, broker: str | None, as_json: bool) -> None:
    """The clients of a consumer group connected to the brokers."""
    async def go(c: AdminClient) -> int:
        return await _show_connections(c, broker, "ConsumerConnections", admin_pb2.GroupRequest(group=group),
                                       f"the consumer group[{group}] not online", as_json)
    run(go, namesrv)


@click.command("producerConnection")
@namesrv_opt
@click.option("-g", "--producerGroup", "group", required=True,
              help="producer group (gRPC producers have none: they match any group)")
@click.option("-t", "--topic", required=True)
@json_opt
def producer_connection(namesrv: str | None, group: str, topic: str, as_json: bool) -> None:
    """The producers connected to the brokers of a topic."""
    async def go(c: AdminClient) -> int:
        return await _show_connections(c, None, "ProducerConnections",
                                       admin_pb2.ProducerConnectionsRequest(group=group, topic=topic),
                                       f"no producer of group {group} on topic {topic} is connected", as_json)
    run(go, namesrv)


# ------------------------------------------------------------------ broker config
@click.command("getBrokerConfig")
@namesrv_opt
@click.option("-b", "--brokerAddr", "broker")
@click.option("-c", "--clusterName", "cluster")
@json_opt
def get_broker_config(namesrv: str | None, broker: str | None, cluster: str | None, as_json: bool) -> None:
    """The running configuration of brokers; which keys updateBrokerConfig may change is listed last."""
    async def go(c: AdminClient) -> int:
        out: dict[str, Any] = {}
        for _, addr in await pick_brokers(c, broker, cluster, slaves=True):
            resp = await c.broker_call(addr, "GetBrokerConfig", common_pb2.Empty())
            out[addr] = {"config": dict(resp.config), "hotReloadable": list(resp.hot_reloadable)}  # type: ignore[attr-defined]
        if as_json:
            emit(True, out, (), ())
            return 0
        for addr, item in out.items():
            click.echo(f"============{addr}============")
            for k, v in sorted(item["config"].items()):
                click.echo(f"{k:<50s}=  {v}")
            click.echo(f"hot-reloadable (updateBrokerConfig): {', '.join(item['hotReloadable'])}")
        return 0
    run(go, namesrv)


@click.command("updateBrokerConfig")
@namesrv_opt
@click.option("-k", "--key", required=True)
@click.option("-v", "--value", required=True)
@click.option("-b", "--brokerAddr", "broker")
@click.option("-c", "--clusterName", "cluster")
@click.option("-a", "--updateAllBroker", "all_text", default="false", help="true: slaves too")
def update_broker_config(namesrv: str | None, key: str, value: str, broker: str | None, cluster: str | None,
                         all_text: str) -> None:
    """Change a hot-reloadable key of running brokers (not written to their config files)."""
    slaves = parse_bool(all_text, "-a")

    async def go(c: AdminClient) -> int:
        failed = 0
        for _, addr in await pick_brokers(c, broker, cluster, slaves=slaves):
            st = await c.broker_call(addr, "UpdateBrokerConfig",
                                     admin_pb2.UpdateBrokerConfigRequest(config={key: value}))
            if refused(f"update broker config of {addr}", st):
                failed += 1
            else:
                click.echo(f"update broker config success, {addr}")
        return 1 if failed else 0
    run(go, namesrv)


# ------------------------------------------------------------------ name-server permission
def _perm_command(name: str, method: str, verb: str) -> click.Command:
    @click.command(name)
    @namesrv_opt
    @click.option("-b", "--brokerName", "broker_name", required=True, help="broker name (not an address)")
    def cmd(namesrv: str | None, broker_name: str) -> None:
        async def go(c: AdminClient) -> int:
            failed = 0
            for addr, resp in await c.namesrv_admin_call(method, admin_pb2.BrokerPermRequest(broker_name=broker_name)):
                if isinstance(resp, str):
                    click.echo(f"{verb} write perm of broker[{broker_name}] in name server[{addr}] Failed: {resp}",
                               err=True)
                    failed += 1
                elif refused(f"name server {addr}", resp.status):  # type: ignore[attr-defined]
                    failed += 1
                else:
                    click.echo(f"{verb} write perm of broker[{broker_name}] in name server[{addr}] OK, "
                               f"{resp.topic_count}")  # type: ignore[attr-defined]
            return 1 if failed else 0
        run(go, namesrv)
    return cmd


wipe_write_perm = _perm_command("wipeWritePerm", "WipeWritePerm", "wipe")
wipe_write_perm.help = ("Take a broker out of rotation: its routes lose write permission on every name server, "
                        "so producers send elsewhere while consumers drain it.")
add_write_perm = _perm_command("addWritePerm", "AddWritePerm", "add")
add_write_perm.help = "Give a broker's routes their write permission back (after wipeWritePerm)."


# ------------------------------------------------------------------ messages and statistics
@click.command("queryMsgByUniqueKey")
@namesrv_opt
@click.option("-i", "--msgId", "msg_id", required=True, help="the client's message id (UNIQ_KEY)")
@click.option("-t", "--topic", required=True)
@click.option("-a", "--showAll", "show_all", is_flag=True, help="every copy (retries), up to 32")
@json_opt
def query_msg_by_unique_key(namesrv: str | None, msg_id: str, topic: str, show_all: bool, as_json: bool) -> None:
    """Find a message by the id its producer gave it."""
    async def go(c: AdminClient) -> int:
        msgs = [m for m in await c.query_message(msg_id, topic, 32)
                if m.msg_id == msg_id or m.properties.get("UNIQ_KEY") == msg_id]
        if not msgs:
            click.echo(f"error: no message with unique key {msg_id} in topic {topic}", err=True)
            return 1
        data, rows = _message_rows(msgs if show_all else msgs[:1])
        emit(as_json, data, MSG_HEADERS, rows)
        return 0
    run(go, namesrv)


@click.command("brokerConsumeStats")
@namesrv_opt
@click.option("-b", "--brokerAddr", "broker", required=True)
@click.option("-l", "--level", type=int, default=0, show_default=True, help="print queues whose diff exceeds this")
@click.option("-o", "--order", "order_text", default="false", help="true: ordered topics only")
@click.option("-t", "--timeoutMillis", "timeout_ms", type=int, default=50000, show_default=True)
@json_opt
def broker_consume_stats(namesrv: str | None, broker: str, level: int, order_text: str, timeout_ms: int,
                         as_json: bool) -> None:
    """Every group's progress on every queue of one broker."""
    order = parse_bool(order_text, "-o")

    async def go(c: AdminClient) -> int:
        c.timeout = timeout_ms / 1000
        offsets = await c.broker_call(broker, "ConsumerOffsets", common_pb2.Empty())
        groups = sorted({o.group for o in offsets.offsets})  # type: ignore[attr-defined]
        ordered = set()
        if order:
            configs = await c.broker_call(broker, "GetTopicConfigs", common_pb2.Empty())
            ordered = {t.topic_name for t in configs.topics if t.order}  # type: ignore[attr-defined]
        name = next((n.name for n in await c.cluster() if n.addr == broker), broker)
        rows, data, total = [], [], 0
        for g in groups:
            resp = await c.broker_call(broker, "ConsumerProgress", admin_pb2.ConsumerProgressRequest(group=g))
            if resp.status.code:  # type: ignore[attr-defined]
                continue  # offsets of a deleted group
            for q in resp.queues:  # type: ignore[attr-defined]
                if order and q.topic not in ordered:
                    continue
                diff = max(0, q.broker_offset - q.consumer_offset)
                if diff < level:
                    continue
                total += diff
                rows.append((q.topic, g, name, q.queue_id, q.broker_offset, q.consumer_offset, diff,
                             ms(q.last_timestamp)))
                data.append(dict(topic=q.topic, group=g, brokerName=name, queueId=q.queue_id,
                                 brokerOffset=q.broker_offset, consumerOffset=q.consumer_offset, diff=diff,
                                 lastTimestamp=q.last_timestamp))
        emit(as_json, {"diffTotal": total, "queues": data}, ("#Topic", "#Group", "#Broker Name", "#QID",
                                                               "#Broker Offset", "#Consumer Offset", "#Diff",
                                                               "#LastTime"), rows)
        if not as_json:
            click.echo(f"\nDiff Total: {total}")
        return 0
    run(go, namesrv)


@click.command("statsAll")
@namesrv_opt
@click.option("-t", "--topic", default=None, help="only this topic")
@click.option("-a", "--activeTopic", "active", is_flag=True, help="only topics with messages in the last 24 h")
@json_opt
def stats_all(namesrv: str | None, topic: str | None, active: bool, as_json: bool) -> None:
    """Per topic and consumer group: accumulation, in/out TPS over the last minute, in/out messages in 24 h.

    Figures are the broker counters Apache's mqadmin statsAll reads (rocketscope/admin_stats.py), so
    both tools print the same figures for one broker; accumulation is the group's consume stats
    (broker offset - consumer offset, summed over the topic's queues, as mqadmin's computeTotalDiff).
    Everything is asked over remoting, so an Apache cluster answers too."""
    async def go(c: AdminClient) -> int:
        topics = [topic] if topic else [t for t in await c.topics() if not t.startswith((RETRY_PREFIX, DLQ_PREFIX))]
        counters = BrokerCounters(c.timeout, c.connection.access_key, c.connection.secret_key)
        rows: list[tuple[Any, ...]] = []
        data: list[dict[str, Any]] = []
        try:
            for t in sorted(topics):
                try:
                    targets = await route_masters(c, t)
                except AdminError:
                    continue
                rows_t, data_t = await _stats_of_topic(counters, t, [a for _, a in targets], active)
                rows += rows_t
                data += data_t
        finally:
            counters.close()
        emit(as_json, data, ("#Topic", "#Consumer Group", "#Accumulation", "#InTPS", "#OutTPS", "#InMsg24Hour",
                             "#OutMsg24Hour"), rows)
        return 0
    run(go, namesrv)


# statsAll asks the routed broker addresses over remoting, as mqadmin; a broker with enableRemoting=false
# closes the connection (its port then speaks gRPC only), which reads as a bare I/O error without this
REMOTING_HINT = (" (statsAll reads each master's counters over remoting, as mqadmin does: the brokers need "
                 "enableRemoting=true, the default)")


async def _stats_of_topic(counters: BrokerCounters, topic: str, masters: list[str], active: bool
                          ) -> tuple[list[tuple[Any, ...]], list[dict[str, Any]]]:
    """mqadmin's printTopicDetail: one row per group (or a NO_CONSUMER row), counters summed over masters."""
    def fetch() -> tuple[Counter, dict[str, Counter]]:
        try:
            put = [counters.counter(a, TOPIC_PUT_NUMS, topic) for a in masters]
            groups = sorted(set().union(*(counters.groups(a, topic) for a in masters)))
            got = {g: [counters.counter(a, GROUP_GET_NUMS, f"{topic}@{g}") for a in masters] for g in groups}
        except (OSError, ValueError, rc.RemotingCallError) as exc:
            raise AdminError(f"statsAll {topic}: broker counters over remoting: {exc}{REMOTING_HINT}") from None
        return (Counter(sum(x.tps for x in put), sum(x.day for x in put)),
                {g: Counter(sum(x.tps for x in v), sum(x.day for x in v)) for g, v in got.items()})

    put, got = await asyncio.to_thread(fetch)
    rows: list[tuple[Any, ...]] = []
    data: list[dict[str, Any]] = []
    if not got:
        if not active or put.day:
            rows.append((topic, "", 0, f"{put.tps:.2f}", "", put.day, "NO_CONSUMER"))
            data.append(dict(topic=topic, group="", accumulation=0, inTps=put.tps, inMsg24Hour=put.day))
        return rows, data
    for g, out in got.items():
        try:
            acc = sum([await asyncio.to_thread(counters.accumulation, a, g, topic) for a in masters])
        except (OSError, ValueError, rc.RemotingCallError) as exc:
            raise AdminError(f"statsAll {topic}: consume stats of {g} over remoting: {exc}{REMOTING_HINT}") from None
        acc = max(0, acc)
        if active and not (put.day or out.day):
            continue
        rows.append((topic, g, acc, f"{put.tps:.2f}", f"{out.tps:.2f}", put.day, out.day))
        data.append(dict(topic=topic, group=g, accumulation=acc, inTps=put.tps, outTps=out.tps,
                         inMsg24Hour=put.day, outMsg24Hour=out.day))
    return rows, data


COMMANDS: list[click.Command] = [
    reset_offset_by_time, clone_group_offset, delete_sub_group, update_topic_perm, topic_status, topic_cluster_list,
    consumer_connection, producer_connection, get_broker_config, update_broker_config, wipe_write_perm,
    add_write_perm, query_msg_by_unique_key, broker_consume_stats, stats_all,
]
