"""`rocketscope admin setConsumeMode`: mqadmin's command of the same name and flags.

It chooses, per topic@group, whether Apache's remoting push consumers with
``setClientRebalance(false)`` pull or pop (broker/request_modes.py, docs/REMOTING.md "Consume modes").
Like mqadmin's SetConsumeModeSubCommand it sends SET_MESSAGE_REQUEST_MODE (401) over remoting to one
broker (``-b``) or to every master of a cluster (``-c``), so it works against Apache brokers as well;
the request is signed with the admin group's ``--accessKey``/``--secretKey`` when they are given (the
code is admin-only under ACL).  Exit codes as the other admin commands: 0 done, 1 a broker refused
(its code and remark printed), 2 no broker reachable.
"""

from __future__ import annotations

import asyncio
import json

import click

from rocketscope.broker.remoting.codec import ResponseCode
from rocketscope.broker.security.remoting_acl import ACCESS_KEY, SIGNATURE, sign

from . import remoting_client as rc
from .admin_cli import CONNECTION, namesrv_opt, run
from .admin_cli_ops import pick_brokers
from .admin_client import AdminClient, AdminError

SET_MESSAGE_REQUEST_MODE = 401  # RocketMQ's RequestCode


def set_mode(conns: rc.Connections, addr: str, body: bytes) -> tuple[int, str]:
    """One SET_MESSAGE_REQUEST_MODE; the broker's code and remark."""
    ext: dict[str, str] = {}
    if CONNECTION.access_key:
        ext[ACCESS_KEY] = CONNECTION.access_key
        ext[SIGNATURE] = sign(ext, body, CONNECTION.secret_key)
    resp = conns.invoke(addr, SET_MESSAGE_REQUEST_MODE, ext, body)
    return resp.code, resp.remark or ""


@click.command("setConsumeMode")
@namesrv_opt
@click.option("-b", "--brokerAddr", "broker", help="this broker only (its listenPort address)")
@click.option("-c", "--clusterName", "cluster", help="every master of this cluster")
@click.option("-t", "--topicName", "topic", required=True, help="topic name")
@click.option("-g", "--groupName", "group", required=True, help="consumer group name")
@click.option("-m", "--mode", required=True, type=click.Choice(["PULL", "POP"]), help="consume mode: PULL or POP")
@click.option("-q", "--popShareQueueNum", "share", type=int, default=0, show_default=True,
              help="queues shared in POP mode (<= 0: every queue to each consumer)")
def set_consume_mode(namesrv: str | None, broker: str | None, cluster: str | None, topic: str, group: str,
                     mode: str, share: int) -> None:
    """Set whether Apache's push consumers of a topic@group pull or pop (mqadmin setConsumeMode)."""
    if not broker and not cluster:
        raise click.UsageError("give -b (a broker) or -c (a cluster)")
    body = json.dumps({"consumerGroup": group, "mode": mode, "popShareQueueNum": share,
                       "topic": topic}).encode()

    async def go(c: AdminClient) -> int:
        targets = [(broker, broker)] if broker else await pick_brokers(c, None, cluster)
        failed = 0
        with rc.Connections(c.timeout) as conns:
            for _, addr in targets:
                try:
                    code, remark = await asyncio.to_thread(set_mode, conns, addr, body)
                except (OSError, ValueError) as exc:
                    raise AdminError(f"setConsumeMode: broker {addr}: {exc}") from None
                if code != ResponseCode.SUCCESS:
                    click.echo(f"error: broker {addr}: {remark} (code {code})", err=True)
                    failed += 1
                    continue
                click.echo(f"set consume mode to {addr} success.")
                click.echo(f"topic[{topic}] group[{group}] consume mode[{mode}] popShareQueueNum[{share}]")
        return 1 if failed else 0
    run(go, namesrv)
