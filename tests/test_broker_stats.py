"""The statsAll counters (broker/broker_stats.py) against counts and times the test chose (a fake clock)."""

from __future__ import annotations

from rocketscope.broker.broker_stats import GROUP_GET_NUMS, TOPIC_PUT_NUMS, BrokerStats


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_windows_sum_what_was_counted_in_them_and_forget_the_rest() -> None:
    clock = Clock(1_000_000.0)
    stats = BrokerStats("DefaultCluster", clock)
    stats.on_put("T", 12, 1200)
    stats.on_get("T", "G", 8, 800)
    minute = stats.get(TOPIC_PUT_NUMS, "T")
    assert minute is not None
    assert minute["statsMinute"] == {"sum": 12, "tps": 12 / 60, "avgpt": 12.0}
    assert minute["statsDay"]["sum"] == 12
    assert stats.get(GROUP_GET_NUMS, "T@G")["statsMinute"]["sum"] == 8  # type: ignore[index]
    assert stats.get(GROUP_GET_NUMS, "T@Other") is None  # never touched: Apache's "not exist"

    clock.t += 61  # the minute window no longer holds them; the hour and the day still do
    stats.on_put("T", 3, 300)
    snap = stats.get(TOPIC_PUT_NUMS, "T")
    assert snap is not None
    assert (snap["statsMinute"]["sum"], snap["statsHour"]["sum"], snap["statsDay"]["sum"]) == (3, 15, 15)
    assert snap["statsHour"]["avgpt"] == 7.5  # two puts of 12 and 3 messages

    clock.t += 3601
    snap = stats.get(TOPIC_PUT_NUMS, "T")
    assert snap is not None
    assert (snap["statsMinute"]["sum"], snap["statsHour"]["sum"], snap["statsDay"]["sum"]) == (0, 0, 15)
    clock.t += 86400
    assert stats.get(TOPIC_PUT_NUMS, "T")["statsDay"]["sum"] == 0  # type: ignore[index]


def test_memory_per_item_is_bounded_by_the_windows() -> None:
    clock = Clock(0.0)
    stats = BrokerStats("c", clock)
    for _ in range(3 * 86400 // 7):  # three days of puts, one every 7 s
        stats.on_put("T", 1, 10)
        clock.t += 7
    item = stats.items[TOPIC_PUT_NUMS]["T"]
    assert [len(q) for q in item.buckets.values()] == [6, 60, 24]
