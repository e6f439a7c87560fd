"""rocketscope/admin_stats.py's readers of the bodies mqadmin statsAll reads, without processes.

The ConsumeStats body is written by broker/remoting/admin_handlers.py (fastjson's form, MessageQueue keys
as objects); the BrokerStatsData windows follow mqadmin's compute24HourSum rule (first non-zero of
day, hour, minute).
"""

from __future__ import annotations

from types import SimpleNamespace

from rocketscope.admin_stats import day_sum, queue_offsets
from rocketscope.broker.remoting.admin_handlers import consume_stats_json


def test_queue_offsets_read_every_queue_of_a_consume_stats_body() -> None:
    rows = [SimpleNamespace(topic="T", queue_id=q, broker_offset=10 + q, consumer_offset=q, last_timestamp=0)
            for q in range(3)]
    body = consume_stats_json("broker-a", rows, tps=1.5)
    assert queue_offsets(body) == [(10, 0), (11, 1), (12, 2)]
    # Apache's own form: consumer offset -1 for a queue the group never committed
    apache = (b'{"consumeTps":0.0,"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:'
              b'{"brokerOffset":4,"consumerOffset":-1,"lastTimestamp":0,"pullOffset":0}}}')
    assert queue_offsets(apache) == [(4, -1)]


def test_day_sum_is_the_first_non_zero_window() -> None:
    assert day_sum({"statsDay": {"sum": 7}, "statsHour": {"sum": 3}, "statsMinute": {"sum": 1}}) == 7
    assert day_sum({"statsDay": {"sum": 0}, "statsHour": {"sum": 0}, "statsMinute": {"sum": 12}}) == 12
    assert day_sum({}) == 0
