"""`rocketscope admin <command>`: mqadmin's commands and flags, tables for people, --json for scripts."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import click

from rocketscope.broker.protocol import admin_pb2, admin_pb2_grpc, common_pb2

from .admin_client import AdminClient, AdminError, Connection
from .lazy_group import LazyGroup


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    cells = [[str(c) for c in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for r in cells:
        click.echo("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())


def emit(as_json: bool, data: Any, headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    if as_json:
        click.echo(json.dumps(data, indent=2, sort_keys=True, default=str))
    else:
        print_table(headers, rows)


# set by the ``admin`` group's options before any command runs (one command per process)
CONNECTION = Connection()


def run(fn: Callable[[AdminClient], Awaitable[int | None]], namesrv: str | None) -> None:
    async def main() -> int:
        client = AdminClient(namesrv or os.environ.get("NAMESRV_ADDR", "127.0.0.1:9876"), connection=CONNECTION)
        try:
            return await fn(client) or 0
        finally:
            await client.close()

    try:
        sys.exit(asyncio.run(main()))
    except AdminError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)


def ms(ts: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts / 1000)) + f".{ts % 1000:03d}" if ts else "-"


namesrv_opt = click.option("-n", "--namesrvAddr", "namesrv", help="name servers, host:port;host:port")
json_opt = click.option("--json", "as_json", is_flag=True, help="print JSON instead of a table")


# Admin commands that live with their subsystem (trace lookup, certificate generation),
# imported only when they run (rocketscope/lazy_group.py).
ADMIN_LAZY_COMMANDS = {
    "queryMsgTraceById": ("rocketscope.trace.cli:query_msg_trace_by_id", "Show a message's trace."),
    "genCerts": ("rocketscope.broker.security.cli:gen_certs", "Generate a test CA and certificates for TLS."),
    "setConsumeMode": ("rocketscope.admin_cli_consume_mode:set_consume_mode",
                       "Set whether a topic@group's push consumers pull or pop (mqadmin setConsumeMode)."),
}


@click.group("admin", cls=LazyGroup, lazy_subcommands=ADMIN_LAZY_COMMANDS)
@click.option("--tls", "use_tls", is_flag=True, envvar="ROCKETSCOPE_ADMIN_TLS",
              help="connect with TLS (a cluster with tls.server.mode=enforcing)")
@click.option("--trustCertPath", "trust", default="", envvar="ROCKETSCOPE_ADMIN_TRUST_CERT",
              help="PEM CA to verify the servers with (default: the system store); implies --tls")
@click.option("--certPath", "cert", default="", envvar="ROCKETSCOPE_ADMIN_CERT",
              help="PEM client certificate for mutual TLS; implies --tls")
@click.option("--keyPath", "key", default="", envvar="ROCKETSCOPE_ADMIN_KEY", help="PEM key of --certPath")
@click.option("--serverNameOverride", "server_name", default="", help="name server certificates must carry")
@click.option("--accessKey", "access_key", default="", envvar="ROCKETMQ_ACCESS_KEY",
              help="sign requests with this ACL account (aclEnable clusters)")
@click.option("--secretKey", "secret_key", default="", envvar="ROCKETMQ_SECRET_KEY", help="secret of --accessKey")
def admin(use_tls: bool, trust: str, cert: str, key: str, server_name: str, access_key: str,
          secret_key: str) -> None:
    """Administer a RocketScope cluster (the commands of RocketMQ's mqadmin)."""
    from rocketscope.tls import TlsClientConfig

    global CONNECTION
    tls = TlsClientConfig(enabled=bool(use_tls or trust or cert), cert_path=cert, key_path=key,
                          trust_cert_path=trust, server_name_override=server_name)
    CONNECTION = Connection(tls, access_key, secret_key)


@admin.command("clusterList")
@namesrv_opt
@json_opt
def cluster_list(namesrv: str | None, as_json: bool) -> None:
    """Brokers of every cluster, with roles and addresses."""
    async def go(c: AdminClient) -> None:
        nodes = await c.cluster()
        rows = [(n.cluster, n.name, n.broker_id, n.role, n.addr, n.grpc_addr, ms(n.last_update_ms)) for n in nodes]
        data = [dict(cluster=n.cluster, brokerName=n.name, brokerId=n.broker_id, role=n.role, addr=n.addr,
                     grpcAddr=n.grpc_addr, lastUpdate=n.last_update_ms, term=n.registration.term,
                     epoch=n.registration.epoch, metricsAddr=n.registration.metrics_addr) for n in nodes]
        emit(as_json, data, ("#Cluster", "#Broker", "#BID", "#Role", "#Addr", "#gRPC", "#LastUpdate"), rows)
    run(go, namesrv)


@admin.command("topicList")
@namesrv_opt
@json_opt
def topic_list(namesrv: str | None, as_json: bool) -> None:
    """Every topic the name servers know."""
    async def go(c: AdminClient) -> None:
        topics = await c.topics()
        emit(as_json, topics, ("#Topic",), [(t,) for t in topics])
    run(go, namesrv)


@admin.command("topicRoute")
@namesrv_opt
@click.option("-t", "--topic", required=True)
@json_opt
def topic_route(namesrv: str | None, topic: str, as_json: bool) -> None:
    """Queues and brokers of a topic."""
    async def go(c: AdminClient) -> int:
        resp = await c.route(topic)
        if resp.status.code != 0:
            click.echo(f"error: {resp.status.remark}", err=True)
            return 1
        r = resp.route
        data = {"queueDatas": [dict(brokerName=q.broker_name, readQueueNums=q.read_queue_nums,
                                    writeQueueNums=q.write_queue_nums, perm=q.perm) for q in r.queue_datas],
                "brokerDatas": [dict(cluster=b.cluster, brokerName=b.broker_name,
                                     brokerAddrs={str(k): v for k, v in b.broker_addrs.items()},
                                     grpcAddrs={str(k): v for k, v in b.grpc_addrs.items()}) for b in r.broker_datas]}
        rows = [(q.broker_name, q.read_queue_nums, q.write_queue_nums, q.perm,
                 ", ".join(f"{k}={v}" for k, v in sorted(next(
                     (b.grpc_addrs for b in r.broker_datas if b.broker_name == q.broker_name), {}).items())))
                for q in r.queue_datas]
        emit(as_json, data, ("#Broker", "#ReadQ", "#WriteQ", "#Perm", "#gRPC"), rows)
        return 0
    run(go, namesrv)


@admin.command("updateTopic")
@namesrv_opt
@click.option("-b", "--brokerAddr", "broker", help="internal address of one broker")
@click.option("-c", "--clusterName", "cluster", help="create on every master of this cluster")
@click.option("-t", "--topic", required=True)
@click.option("-r", "--readQueueNums", "read", type=int, default=8, show_default=True)
@click.option("-w", "--writeQueueNums", "write", type=int, default=8, show_default=True)
@click.option("-p", "--perm", type=int, default=6, show_default=True)
@click.option("-o", "--order", is_flag=True, help="ordered topic")
@click.option("-a", "--attributes", default="", help="+message.type=FIFO style, comma-separated")
def update_topic(namesrv: str | None, broker: str | None, cluster: str | None, topic: str, read: int, write: int,
                 perm: int, order: bool, attributes: str) -> None:
    """Create or update a topic."""
    attrs = {}
    for item in filter(None, (a.strip() for a in attributes.split(","))):
        key, _, value = item.lstrip("+").partition("=")
        attrs[key] = value

    async def go(c: AdminClient) -> int:
        failed = 0
        for addr in await c.target_brokers(broker, cluster):
            cfg = common_pb2.TopicConfig(topic_name=topic, read_queue_nums=read, write_queue_nums=write, perm=perm,
                                         order=order, attributes=attrs)
            st = await c.broker_call(addr, "UpdateTopic", admin_pb2.UpdateTopicRequest(config=cfg))
            if st.code:  # type: ignore[attr-defined]
                click.echo(f"update topic to {addr} failed: {st.remark}", err=True)  # type: ignore[attr-defined]
                failed += 1
            else:
                click.echo(f"create topic to {addr} success.")
        return 1 if failed else 0
    run(go, namesrv)


@admin.command("deleteTopic")
@namesrv_opt
@click.option("-c", "--clusterName", "cluster")
@click.option("-t", "--topic", required=True)
def delete_topic(namesrv: str | None, cluster: str | None, topic: str) -> None:
    """Delete a topic from the brokers of a cluster and from the name servers."""
    async def go(c: AdminClient) -> int:
        for addr in await c.target_brokers(None, cluster):
            st = await c.broker_call(addr, "DeleteTopic", admin_pb2.TopicRequest(topic=topic))
            click.echo(f"delete topic [{topic}] from {addr}: {'success' if not st.code else st.remark}")  # type: ignore[attr-defined]
        await c.delete_topic_in_namesrv(topic)
        return 0
    run(go, namesrv)


@admin.command("updateSubGroup")
@namesrv_opt
@click.option("-b", "--brokerAddr", "broker")
@click.option("-c", "--clusterName", "cluster")
@click.option("-g", "--groupName", "group", required=True)
@click.option("-s", "--consumeEnable", "enable", type=bool, default=True, show_default=True)
@click.option("-o", "--consumeMessageOrderly", "orderly", type=bool, default=False, show_default=True)
@click.option("-r", "--retryMaxTimes", "retry_max", type=int, default=16, show_default=True)
@click.option("-q", "--retryQueueNums", "retry_queues", type=int, default=1, show_default=True)
@click.option("-p", "--groupRetryPolicy", "retry_policy", default="",
              help='the retry policy as JSON, as mqadmin: {"type":"EXPONENTIAL","exponentialRetryPolicy":'
                   '{"initial":5000,"max":7200000,"multiplier":2}} or {"type":"CUSTOMIZED","customizedRetryPolicy":'
                   '{"next":[1000,5000,10000]}} (ms); consumers get it as their back-off in Settings')
@click.option("-a", "--attributes", default="", help="attribute changes, comma-separated, as mqadmin's --attributes: "
              "+key=value adds or updates, -key deletes, the group's other attributes are kept (Apache 5.5.0's keys: "
              "lite.bind.topic, lite.sub.model Shared/Exclusive, lite.sub.client.quota, "
              "lite.sub.reset.offset.exclusive, lite.sub.reset.offset.unsubscribe, lite.sub.client.max.event.cnt, "
              "lite.sub.wildcard, priority.factor)")
def update_sub_group(namesrv: str | None, broker: str | None, cluster: str | None, group: str, enable: bool,
                     orderly: bool, retry_max: int, retry_queues: int, retry_policy: str, attributes: str) -> None:
    """Create or update a consumer group."""
    async def go(c: AdminClient) -> int:
        failed = 0
        for addr in await c.target_brokers(broker, cluster):
            cfg = common_pb2.SubscriptionGroupConfig(group_name=group, consume_enable=enable,
                                                     consume_message_orderly=orderly, retry_max_times=retry_max,
                                                     retry_queue_nums=retry_queues,
                                                     group_retry_policy=retry_policy)
            for item in filter(None, (a.strip() for a in attributes.split(","))):
                key, _, value = item.lstrip("+").partition("=")
                cfg.attributes[key] = value
            st = await c.broker_call(addr, "UpdateSubGroup", admin_pb2.UpdateSubGroupRequest(config=cfg))
            if st.code:  # type: ignore[attr-defined]
                click.echo(f"update subscription group to {addr} failed: {st.remark}", err=True)  # type: ignore[attr-defined]
                failed += 1
            else:
                click.echo(f"create subscription group to {addr} success.")
        return 1 if failed else 0
    run(go, namesrv)


def _message_rows(msgs: list[admin_pb2.StoredMessageView]) -> tuple[list[dict[str, Any]], list[tuple[Any, ...]]]:
    data = [dict(msgId=m.msg_id, offsetMsgId=m.offset_msg_id, topic=m.topic, broker=m.broker_name,
                 queueId=m.queue_id, queueOffset=m.queue_offset, commitLogOffset=m.commitlog_offset,
                 bornTimestamp=m.born_timestamp, storeTimestamp=m.store_timestamp, bornHost=m.born_host,
                 storeHost=m.store_host, reconsumeTimes=m.reconsume_times, properties=dict(m.properties),
                 bodyLength=len(m.body), body=m.body.decode("utf-8", "replace")) for m in msgs]
    rows = [(m.msg_id, m.topic, m.broker_name, m.queue_id, m.queue_offset, ms(m.store_timestamp),
             m.properties.get("TAGS", ""), m.properties.get("KEYS", "")) for m in msgs]
    return data, rows


MSG_HEADERS = ("#MsgId", "#Topic", "#Broker", "#QID", "#Offset", "#StoreTime", "#Tags", "#Keys")


@admin.command("queryMsgById")
@namesrv_opt
@click.option("-i", "--msgId", "msg_id", required=True)
@click.option("-t", "--topic", default=None, help="topic (optional: ids are also indexed without it)")
@json_opt
def query_msg_by_id(namesrv: str | None, msg_id: str, topic: str | None, as_json: bool) -> None:
    """Find a message by its id (the client's message id, or an offsetMsgId)."""
    async def go(c: AdminClient) -> int:
        msgs = await c.query_message(msg_id, topic, 4)
        if not msgs and len(msg_id) == 32:
            msgs = await _by_offset_msg_id(c, msg_id)
        if not msgs:
            click.echo(f"error: no message with id {msg_id}{' in topic ' + topic if topic else ''}", err=True)
            return 1
        data, rows = _message_rows(msgs)
        emit(as_json, data, MSG_HEADERS, rows)
        return 0
    run(go, namesrv)


async def _by_offset_msg_id(c: AdminClient, offset_msg_id: str) -> list[admin_pb2.StoredMessageView]:
    try:
        raw = bytes.fromhex(offset_msg_id)
    except ValueError:
        return []
    host = ".".join(str(b) for b in raw[:4])
    port = int.from_bytes(raw[4:8], "big")
    offset = int.from_bytes(raw[8:16], "big")
    for b in await c.cluster():
        if b.grpc_addr == f"{host}:{port}":
            resp = await c.broker_call(b.addr, "QueryMessage", admin_pb2.QueryMessageRequest(commitlog_offset=offset))
            return list(resp.messages)  # type: ignore[attr-defined]
    return []


@admin.command("queryMsgByKey")
@namesrv_opt
@click.option("-t", "--topic", required=True)
@click.option("-k", "--msgKey", "key", required=True)
@click.option("-c", "--maxNum", "max_num", type=int, default=64, show_default=True)
@json_opt
def query_msg_by_key(namesrv: str | None, topic: str, key: str, max_num: int, as_json: bool) -> None:
    """Find messages of a topic by business key."""
    async def go(c: AdminClient) -> int:
        msgs = await c.query_message(key, topic, max_num)
        if not msgs:
            click.echo(f"error: query message by key finished, but no message (topic {topic}, key {key})", err=True)
            return 1
        data, rows = _message_rows(msgs)
        emit(as_json, data, MSG_HEADERS, rows)
        return 0
    run(go, namesrv)


@admin.command("consumerProgress")
@namesrv_opt
@click.option("-g", "--groupName", "group", required=True)
@click.option("-t", "--topic", default="")
@json_opt
def consumer_progress(namesrv: str | None, group: str, topic: str, as_json: bool) -> None:
    """Per queue: broker offset, consumer offset, in flight and lag."""
    async def go(c: AdminClient) -> int:
        rows, data, total = [], [], 0
        for b in await c.masters():
            resp = await c.broker_call(b.addr, "ConsumerProgress",
                                       admin_pb2.ConsumerProgressRequest(group=group, topic=topic))
            if resp.status.code:  # type: ignore[attr-defined]
                continue
            for q in resp.queues:  # type: ignore[attr-defined]
                lag = max(0, q.broker_offset - q.consumer_offset)
                total += lag
                rows.append((q.topic, b.name, q.queue_id, q.broker_offset, q.consumer_offset, q.inflight, lag,
                             ms(q.last_timestamp)))
                data.append(dict(topic=q.topic, brokerName=b.name, queueId=q.queue_id, brokerOffset=q.broker_offset,
                                 consumerOffset=q.consumer_offset, inflight=q.inflight, diff=lag,
                                 lastTimestamp=q.last_timestamp))
        if not data:
            click.echo(f"error: consumer group {group} has no progress on any broker", err=True)
            return 1
        emit(as_json, {"group": group, "diffTotal": total, "queues": data},
             ("#Topic", "#Broker", "#QID", "#BrokerOffset", "#ConsumerOffset", "#InFlight", "#Diff", "#LastTime"),
             rows)
        if not as_json:
            click.echo(f"\nDiff Total: {total}")
        return 0
    run(go, namesrv)


@admin.command("brokerStatus")
@namesrv_opt
@click.option("-b", "--brokerAddr", "broker", help="internal address; default: every broker")
@json_opt
def broker_status(namesrv: str | None, broker: str | None, as_json: bool) -> None:
    """Runtime figures of brokers (offsets, disk, counts)."""
    async def go(c: AdminClient) -> int:
        addrs = [broker] if broker else [b.addr for b in await c.cluster()]
        out = {}
        for addr in addrs:
            resp = await c.broker_call(addr, "BrokerStatus", common_pb2.Empty())
            out[addr] = dict(resp.table)  # type: ignore[attr-defined]
        rows = [(addr, k, v) for addr, table in out.items() for k, v in sorted(table.items())]
        emit(as_json, out, ("#Broker", "#Key", "#Value"), rows)
        return 0
    run(go, namesrv)


@admin.command("switchover")
@namesrv_opt
@click.option("-b", "--brokerAddr", "broker", required=True, help="internal address of the slave to promote")
@click.option("--role", type=click.Choice(["SYNC_MASTER", "ASYNC_MASTER"]), default="SYNC_MASTER", show_default=True)
@click.option("--demote", default=None, help="internal address of the old master to turn into a slave (if alive)")
@click.option("--slave-id", type=int, default=1, show_default=True, help="broker id the demoted master takes")
def switchover(namesrv: str | None, broker: str, role: str, demote: str | None, slave_id: int) -> None:
    """Master/Slave mode: promote a slave to master by hand (RocketMQ has no automatic failover there)."""
    async def go(c: AdminClient) -> int:
        if demote:
            st = await c.broker_call(demote, "ChangeRole", admin_pb2.ChangeRoleRequest(role="SLAVE",
                                                                                        broker_id=slave_id))
            if st.code:  # type: ignore[attr-defined]
                click.echo(f"error: demoting {demote}: {st.remark}", err=True)  # type: ignore[attr-defined]
                return 1
        st = await c.broker_call(broker, "ChangeRole", admin_pb2.ChangeRoleRequest(role=role, broker_id=0))
        if st.code:  # type: ignore[attr-defined]
            click.echo(f"error: promoting {broker}: {st.remark}", err=True)  # type: ignore[attr-defined]
            return 1
        click.echo(f"{broker} is now {role} (broker id 0)")
        return 0
    run(go, namesrv)


@admin.command("haStatus")
@namesrv_opt
@click.option("-b", "--brokerAddr", "broker", help="internal address; default: every broker")
def ha_status(namesrv: str | None, broker: str | None) -> None:
    """Replication state of brokers: role, offsets, replicas and their lag (JSON)."""
    async def go(c: AdminClient) -> int:
        addrs = [broker] if broker else [b.addr for b in await c.cluster()]
        out = {}
        for addr in addrs:
            resp = await c.broker_call(addr, "HaStatus", common_pb2.Empty())
            out[addr] = json.loads(resp.json)  # type: ignore[attr-defined]
        click.echo(json.dumps(out, indent=2, sort_keys=True))
        return 0
    run(go, namesrv)


@admin.command("haEvents")
@namesrv_opt
@click.option("-b", "--brokerAddr", "broker", help="internal address; default: every broker")
@click.option("--max", "max_events", type=int, default=50, show_default=True,
              help="newest events per broker; older changes (roles, elections, sets, truncations) are listed "
                   "as well")
@json_opt
def ha_events(namesrv: str | None, broker: str | None, max_events: int, as_json: bool) -> None:
    """Replication events (role changes, elections, acks, commits, truncations) from RMQ_SYS_HA_EVENTS.

    Every node's events, followers' included, are in that replicated topic, so the history
    survives restarts; each broker answers from its own copy and duplicates are merged.
    """
    async def go(c: AdminClient) -> int:
        addrs = [broker] if broker else [b.addr for b in await c.cluster()]
        texts: list[str] = []
        for addr in addrs:
            resp = await c.broker_call(addr, "HaEvents", admin_pb2.HaEventsRequest(max=max_events))
            texts += list(resp.events)  # type: ignore[attr-defined]
        from rocketscope.broker.ha.event_relay import dedupe

        events = dedupe(texts)  # every replica of a group answers from the same replicated topic
        rows = [(ms(e["ts"]), e["group"], e["node"], e["type"],
                 e.get("role") or e.get("leader") or e.get("replica", ""),
                 e["term"] if e["term"] >= 0 else e["epoch"], e["offset"]) for e in events]
        emit(as_json, events, ("#Time", "#Group", "#Node", "#Type", "#Detail", "#Term/Epoch", "#Offset"), rows)
        return 0
    run(go, namesrv)


async def _container_call(addr: str, method: str, request: object) -> object:
    import grpc

    async with CONNECTION.channel(addr) as ch:
        try:
            return await getattr(admin_pb2_grpc.ContainerAdminStub(ch), method)(request, timeout=30,
                                                                             metadata=CONNECTION.metadata())
        except grpc.aio.AioRpcError as exc:
            if exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                raise AdminError(f"container {addr} did not answer {method}: {exc.code().name}") from None
            raise AdminError(f"{exc.details()} ({exc.code().name})") from None


@admin.command("addBroker")
@namesrv_opt
@click.option("-c", "--brokerContainerAddr", "container", required=True, help="container admin address")
@click.option("-b", "--brokerConfigPath", "config_path", required=True, help="broker config file (on the container)")
def add_broker(namesrv: str | None, container: str, config_path: str) -> None:
    """Start a broker inside a running BrokerContainer."""
    async def go(c: AdminClient) -> int:
        st = await _container_call(container, "AddBroker", admin_pb2.AddBrokerRequest(config_path=config_path))
        if st.code:  # type: ignore[attr-defined]
            click.echo(f"error: {st.remark}", err=True)  # type: ignore[attr-defined]
            return 1
        click.echo(f"add broker {config_path} to {container} success.")
        return 0
    run(go, None)


@admin.command("removeBroker")
@namesrv_opt
@click.option("-c", "--brokerContainerAddr", "container", required=True, help="container admin address")
@click.option("-b", "--brokerIdentity", "identity", required=True, help="clusterName:brokerName:brokerId")
def remove_broker(namesrv: str | None, container: str, identity: str) -> None:
    """Stop and remove a broker from a running BrokerContainer."""
    parts = identity.split(":")
    if len(parts) != 3 or not parts[2].lstrip("-").isdigit():
        raise click.BadParameter("expected clusterName:brokerName:brokerId", param_hint="-b")

    async def go(c: AdminClient) -> int:
        req = admin_pb2.RemoveBrokerRequest(cluster_name=parts[0], broker_name=parts[1], broker_id=int(parts[2]))
        st = await _container_call(container, "RemoveBroker", req)
        if st.code:  # type: ignore[attr-defined]
            click.echo(f"error: {st.remark}", err=True)  # type: ignore[attr-defined]
            return 1
        click.echo(f"remove broker {identity} from {container} success.")
        return 0
    run(go, None)


def _mount_controller_commands() -> None:
    """Controller mode's commands (getSyncStateSet, getBrokerEpoch, electMaster, getControllerMetaData)."""
    from rocketscope.admin_cli_controller import COMMANDS

    for cmd in COMMANDS:
        admin.add_command(cmd)


_mount_controller_commands()


def _mount_ops_commands() -> None:
    """mqadmin's maintenance commands (resetOffsetByTime, wipeWritePerm, ...: rocketscope/admin_cli_ops.py)."""
    from .admin_cli_ops import COMMANDS

    for cmd in COMMANDS:
        admin.add_command(cmd)


_mount_ops_commands()
