"""`rocketscope admin` commands of controller mode: getSyncStateSet, getBrokerEpoch, electMaster,
getControllerMetaData (mqadmin's names and options).

They are CLI code (the top layer, docs/ARCHITECTURE.md), beside the other admin command modules, and are
mounted on the admin group by rocketscope/admin_cli.py; they speak the controller's protocol through its
client (broker/controller/client.py).  Controller addresses come from ``-a`` (mqadmin's
``controllerAddress``), `;`-separated; calls follow the controller leader.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable, Coroutine
from typing import Any

import click
import grpc
from google.protobuf.json_format import MessageToDict

from rocketscope.broker.controller.client import ControllerClient, ControllerUnavailable
from rocketscope.broker.controller.config import controller_addresses
from rocketscope.broker.controller.state import Code
from rocketscope.broker.protocol import controller_pb2 as cpb
from rocketscope.broker.protocol import controller_pb2_grpc

ctl_opt = click.option("-a", "--controllerAddress", "controllers", required=True,
                       help="controllers' client addresses, host:port;host:port")
json_opt = click.option("--json", "as_json", is_flag=True, help="print JSON")


def _channel_factory() -> Callable[..., grpc.aio.Channel]:
    from rocketscope.admin_cli import CONNECTION

    def make(addr: str, options: Any = ()) -> grpc.aio.Channel:
        return CONNECTION.channel(addr)
    return make


def _run(fn: Callable[[], Coroutine[Any, Any, Any]], as_json: bool) -> None:
    try:
        data: Any = asyncio.run(fn())
    except ControllerUnavailable as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    except grpc.aio.AioRpcError as exc:
        click.echo(f"error: {exc.code().name}: {exc.details()}", err=True)
        sys.exit(2)
    code = data.pop("_code", 0) if isinstance(data, dict) else 0
    click.echo(json.dumps(data, indent=2 if not as_json else None, sort_keys=True))
    sys.exit(1 if code else 0)


def _info(info: cpb.ReplicaInfo) -> dict[str, Any]:
    return {"clusterName": info.cluster_name, "brokerName": info.broker_name,
            "masterBrokerId": info.master_broker_id, "masterEpoch": info.master_epoch,
            "syncStateSet": list(info.sync_state_set), "syncStateSetEpoch": info.sync_state_set_epoch,
            "replicas": [MessageToDict(r, preserving_proto_field_name=False, always_print_fields_with_no_presence=True)
                         for r in info.replicas]}


@click.command("getSyncStateSet")
@ctl_opt
@click.option("-b", "--brokerName", "names", multiple=True, help="broker set(s); default: all")
@json_opt
def get_sync_state_set(controllers: str, names: tuple[str, ...], as_json: bool) -> None:
    """Master, epochs and SyncStateSet of broker sets, from the controller leader."""
    async def go() -> Any:
        c = ControllerClient(controller_addresses(controllers), channel=_channel_factory())
        try:
            resp = await c.call("GetSyncStateData", cpb.SyncStateDataRequest(broker_names=list(names)))
        finally:
            await c.close()
        return [_info(i) for i in resp.infos]
    _run(go, as_json)


@click.command("getControllerMetaData")
@ctl_opt
@json_opt
def get_controller_metadata(controllers: str, as_json: bool) -> None:
    """Every controller's view: role, term, leader, commit index (mqadmin getControllerMetaData)."""
    async def go() -> Any:
        make = _channel_factory()
        out = []
        for addr in controller_addresses(controllers):
            try:
                async with make(addr) as ch:
                    md = await controller_pb2_grpc.ControllerStub(ch).GetMetaData(cpb.MetaDataRequest(), timeout=3)
                d = MessageToDict(md, preserving_proto_field_name=False, always_print_fields_with_no_presence=True)
                d.pop("status", None)
                out.append({"address": addr, **d})
            except grpc.aio.AioRpcError as exc:
                out.append({"address": addr, "error": exc.code().name})
        return out
    _run(go, as_json)


@click.command("electMaster")
@ctl_opt
@click.option("-c", "--clusterName", "cluster", default="DefaultCluster", show_default=True)
@click.option("-b", "--brokerName", "name", required=True)
@click.option("-i", "--brokerId", "broker_id", type=int, required=True, help="the broker to make master")
@json_opt
def elect_master(controllers: str, cluster: str, name: str, broker_id: int, as_json: bool) -> None:
    """Make a given broker master (designated election; it must be alive and in the SyncStateSet)."""
    async def go() -> Any:
        c = ControllerClient(controller_addresses(controllers), channel=_channel_factory())
        try:
            resp = await c.call("ElectMaster", cpb.ElectMasterRequest(cluster_name=cluster, broker_name=name,
                                                                       broker_id=broker_id, designate_elect=True))
        finally:
            await c.close()
        code = resp.status.code
        return {"_code": code not in (Code.SUCCESS, Code.CONTROLLER_MASTER_STILL_EXIST),
                "code": Code(code).name, "remark": resp.status.remark, **_info(resp.info)}
    _run(go, as_json)


@click.command("getBrokerEpoch")
@click.option("-b", "--brokerAddr", "broker", required=True, help="the broker's internal (admin) address")
@json_opt
def get_broker_epoch(broker: str, as_json: bool) -> None:
    """A broker's epoch cache: (epoch, start offset, end offset) entries, max and confirm offset."""
    async def go() -> Any:
        async with _channel_factory()(broker) as ch:
            cache = await controller_pb2_grpc.BrokerReplicaStub(ch).GetBrokerEpoch(cpb.BrokerEpochRequest(),
                                                                                    timeout=3)
        return {"brokerName": cache.broker_name, "brokerId": cache.broker_id, "role": cache.role,
                "masterEpoch": cache.master_epoch, "maxOffset": cache.max_offset,
                "confirmOffset": cache.confirm_offset,
                "epochs": [{"epoch": e.epoch, "startOffset": e.start_offset, "endOffset": e.end_offset}
                           for e in cache.entries]}
    _run(go, as_json)


COMMANDS = (get_sync_state_set, get_controller_metadata, elect_master, get_broker_epoch)
