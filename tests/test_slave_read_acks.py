"""slaveReadEnable: the acks of what a slave handed out while acting for its dead master reach the master
once it is back (broker/slave_read.py, broker/pop.py ``_slave_receipt``; docs/CONTROLLER.md "slaveReadEnable").

While the master is down the slave hands messages out and takes their acks itself. Once the master
registers again, an ack of such a hand-out reaches the slave (a client acks where it received) or, after
the client's route refresh, the master. The slave forwards the first kind to the master; the master takes
both by offset (the slave's receipts say they are the slave's), so nothing acknowledged comes again.
Before, an ack reaching the master was refused (INVALID_RECEIPT_HANDLE) and the master redelivered
the message. The same holds for a new invisible time (ChangeInvisibleDuration, a consumer's retry
back-off): the slave forwards it and the master keeps the message in flight until then. Ground truth:
6 messages sent, all 6 received from the acting slave (2 acked at the slave while acting, 2 at the
slave after the master's return, 1 given 120 s more at the slave, 1 acked at the master); none of them
comes from the master again, and the 2 sent after its return do. Raw gRPC requests stand for the clients,
so which node each ack reaches is chosen, not left to a route refresh (30 s in the official clients).
Before the kill, the consume mode set on the master (SET_MESSAGE_REQUEST_MODE) is seen copied to the slave.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from cluster import LocalCluster, broker_has_topic, cluster_with_namesrv, ha_status, wait_until
from conftest import failed_call
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as svc
from rocketmq.grpc_protocol import service_pb2_grpc as svc_grpc

from rocketscope.broker.remoting.client import RemotingClient
from rocketscope.broker.remoting.codec import RequestCode, ResponseCode

pytestmark = pytest.mark.e2e
TOPIC, GROUP = "TopicSlaveAck", "GroupSlaveAck"
MD = (("x-mq-client-id", "slave-ack-test"),)


@pytest.fixture()
def ms(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    with cluster_with_namesrv(tmp_path_factory.mktemp("slaveread-acks"), lambda: failed_call(request)) as c:
        master = c.start_broker("master", brokerName="broker-k", brokerRole="SYNC_MASTER", slaveReadEnable="true")
        slave = c.start_broker("slave", brokerName="broker-k", brokerRole="SLAVE", brokerId=1, slaveReadEnable="true")
        with RemotingClient(master.admin_addr) as b:
            fields = {"topic": TOPIC, "readQueueNums": "1", "writeQueueNums": "1", "perm": "6"}
            assert b.invoke(17, fields).code == ResponseCode.SUCCESS
        wait_until(lambda: ha_status(slave.admin_addr)["connected"], what="slave replicating")
        wait_until(lambda: broker_has_topic(slave.admin_addr, TOPIC), what="the topic's config on the slave")
        yield c


def send(admin_addr: str, bodies: list[str]) -> None:
    """Over remoting to the master (SYNC_MASTER: on the slave once answered)."""
    with RemotingClient(admin_addr) as b:
        for body in bodies:
            fields = {"producerGroup": "SlaveAckProducer", "topic": TOPIC, "defaultTopic": "TBW102",
                      "defaultTopicQueueNums": "1", "queueId": "0", "sysFlag": "0",
                      "bornTimestamp": str(int(time.time() * 1000)), "flag": "0", "properties": ""}
            resp = b.invoke(RequestCode.SEND_MESSAGE, fields, body.encode())
            assert resp.code == ResponseCode.SUCCESS, resp.remark


def receive(endpoint: str, want: int, invisible_s: int, within_s: float) -> list[tuple[str, str]]:
    """(body, receipt handle) of what ReceiveMessage hands out at ``endpoint`` within ``within_s``."""
    out: list[tuple[str, str]] = []
    deadline = time.monotonic() + within_s
    with grpc.insecure_channel(endpoint) as ch:
        stub = svc_grpc.MessagingServiceStub(ch)
        while len(out) < want and time.monotonic() < deadline:
            req = svc.ReceiveMessageRequest(batch_size=16, auto_renew=False)
            req.group.name = GROUP
            req.message_queue.topic.name = TOPIC
            req.message_queue.id = 0
            req.filter_expression.type = pb.TAG
            req.filter_expression.expression = "*"
            req.invisible_duration.FromSeconds(invisible_s)
            req.long_polling_timeout.FromSeconds(1)
            for resp in stub.ReceiveMessage(req, metadata=MD, timeout=10):
                if resp.WhichOneof("content") == "message":
                    m = resp.message
                    out.append((m.body.decode(), m.system_properties.receipt_handle))
    return out


def ack(endpoint: str, handles: list[str]) -> Any:
    with grpc.insecure_channel(endpoint) as ch:
        req = svc.AckMessageRequest()
        req.group.name = GROUP
        req.topic.name = TOPIC
        for i, h in enumerate(handles):
            req.entries.add(message_id=f"m{i}", receipt_handle=h)
        return svc_grpc.MessagingServiceStub(ch).AckMessage(req, metadata=MD, timeout=10)


def change_invisible(endpoint: str, handle: str, seconds: int) -> Any:
    with grpc.insecure_channel(endpoint) as ch:
        req = svc.ChangeInvisibleDurationRequest(receipt_handle=handle, message_id="m4")
        req.group.name = GROUP
        req.topic.name = TOPIC
        req.invisible_duration.FromSeconds(seconds)
        return svc_grpc.MessagingServiceStub(ch).ChangeInvisibleDuration(req, metadata=MD, timeout=10)


def assignment(addr: str, group: str) -> list[tuple[int, str]] | None:
    """QUERY_ASSIGNMENT of TOPIC for ``group`` at ``addr``, after a heartbeat of one consumer there."""
    with RemotingClient(addr) as b:
        beat = {"clientID": "c1", "producerDataSet": [], "consumerDataSet": [{
            "groupName": group, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
            "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET", "subscriptionDataSet": []}]}
        assert b.invoke(RequestCode.HEART_BEAT, {}, json.dumps(beat).encode()).code == ResponseCode.SUCCESS
        ask = {"topic": TOPIC, "consumerGroup": group, "clientId": "c1", "strategyName": "AVG",
               "messageModel": "CLUSTERING"}
        got = json.loads(b.invoke(RequestCode.QUERY_ASSIGNMENT, {}, json.dumps(ask).encode()).body)
    found = got.get("messageQueueAssignments")
    return None if found is None else sorted((a["messageQueue"]["queueId"], a["mode"]) for a in found)


def test_acks_of_the_acting_slaves_hand_outs_reach_the_returned_master(ms: LocalCluster) -> None:
    master, slave = ms.brokers["master"], ms.brokers["slave"]
    sent = [f"s-{i}" for i in range(6)]
    send(master.admin_addr, sent)
    # mqadmin setConsumeMode on the master reaches the slave with its metadata copy (Apache's SlaveSynchronize
    # copies messageRequestMode too), so an acting slave assigns as its master did
    assert assignment(slave.admin_addr, GROUP) == [(0, "PULL")]  # the default
    with RemotingClient(master.admin_addr) as b:
        mode = {"topic": TOPIC, "consumerGroup": GROUP, "mode": "POP", "popShareQueueNum": 0}
        assert b.invoke(401, {}, json.dumps(mode).encode()).code == ResponseCode.SUCCESS
    wait_until(lambda: assignment(slave.admin_addr, GROUP) == [(-1, "POP")], timeout=20,
               what="the slave answering the master's consume mode")
    master.proc.kill9()
    wait_until(lambda: ha_status(slave.admin_addr)["slaveReadActing"], timeout=30, what="the slave acting")
    got = receive(slave.endpoint, 6, 300, within_s=20)  # invisible long after the test: only acks end them
    assert sorted(b for b, _ in got) == sent
    assert all(h.endswith(" slave") for _, h in got), got[0][1]  # the acting slave's receipts say so
    handles = [h for _, h in sorted(got)]
    assert ack(slave.endpoint, handles[:2]).status.code == pb.OK  # taken by the acting slave itself

    ms.start_broker("master")
    wait_until(lambda: not ha_status(slave.admin_addr)["slaveReadActing"], timeout=30,
               what="the slave no longer acting (the master registered again)")
    assert ack(slave.endpoint, handles[2:4]).status.code == pb.OK  # a client still routed to the slave
    assert ha_status(slave.admin_addr)["slaveReadForwardedAcks"] == 2
    # a consumer still routed to the slave asks for more time (a retry back-off): forwarded too, the master
    # answers with a receipt of its own and keeps the message in flight until then
    changed = change_invisible(slave.endpoint, handles[4], 120)
    assert changed.status.code == pb.OK, changed.status.message
    assert not changed.receipt_handle.endswith(" slave"), "the answer should be the master's receipt"
    at_master = ack(master.endpoint, handles[5:])  # a client whose route moved to the master
    assert at_master.status.code == pb.OK, at_master.status.message

    after = ["after-0", "after-1"]
    send(master.admin_addr, after)
    # what the master hands out (from its committed offset up, so an unacknowledged old message would come
    # first; s-4 is invisible for its new 120 s: before, the change stayed on the slave and s-4 came here at once)
    again = receive(master.endpoint, len(after) + 1, 60, within_s=10)  # none of them expires meanwhile
    assert sorted(b for b, _ in again) == after, again
    assert ack(master.endpoint, [changed.receipt_handle]).status.code == pb.OK  # the master's own in-flight
    assert ha_status(slave.admin_addr)["slaveReadForwardedInvisibleChanges"] == 1
