"""Broker configuration checks that need no running broker."""

from __future__ import annotations

import pytest

from rocketscope.broker.broker_config import load_broker_config
from rocketscope.config import ConfigError
from rocketscope.ports import free_port


def test_two_listeners_on_one_port_are_refused_naming_the_key() -> None:
    with pytest.raises(ConfigError, match="listenPort has bad value '9000': the same port as grpcServerPort"):
        load_broker_config({"grpcServerPort": "9000", "listenPort": "9000"})
    with pytest.raises(ConfigError, match=r"haListenPort .*listenPort \+ 1"):
        load_broker_config({"grpcServerPort": "10912", "listenPort": "10911"})
    settings = load_broker_config({"grpcServerPort": "8081", "listenPort": "10911"})
    assert (settings.grpcServerPort, settings.listenPort) == (8081, 10911)


def test_free_ports_are_never_handed_out_twice_and_avoid_the_ephemeral_range() -> None:
    ports = [free_port() for _ in range(200)]
    assert len(set(ports)) == len(ports)
    assert all(p < 32768 for p in ports)


def test_max_message_size_is_lowered_to_what_one_commit_log_segment_holds() -> None:
    """A 1 MiB body on 1 MiB segments was accepted and then broke every replica's append."""
    small = load_broker_config({"mappedFileSizeCommitLog": str(1 << 20)})
    assert small.maxMessageSize < 1 << 20
    assert load_broker_config({}).maxMessageSize == 4 * 1024 * 1024  # RocketMQ's default, 1 GiB segments
    assert load_broker_config({"mappedFileSizeCommitLog": "65536"}).maxMessageSize == 32768


@pytest.mark.parametrize("raw", ["yes", "1", "on", "no"])
def test_a_boolean_other_than_true_or_false_is_refused_naming_the_key(raw: str) -> None:
    """Apache RocketMQ reads booleans with Java's Boolean.parseBoolean: ``yes`` or ``1`` would silently be
    false there; here the broker and its telemetry keys refuse them, naming the key."""
    with pytest.raises(ConfigError, match=f"autoCreateTopicEnable.*{raw}"):
        load_broker_config({"autoCreateTopicEnable": raw})
    from rocketscope.telemetry.config import TelemetryConfig

    with pytest.raises(ConfigError, match=f"metricsInDelta.*{raw}"):
        TelemetryConfig.from_properties({"metricsInDelta": raw})
    for spelled, value in (("TRUE", True), ("False", False)):
        assert load_broker_config({"autoCreateTopicEnable": spelled}).autoCreateTopicEnable is value


def test_every_key_reads_the_same_as_an_attribute_and_through_get_also_after_set() -> None:
    """Values are mirrored as plain attributes (a read must not go through a failed lookup first,
    rocketscope/config.py); the mirror may never disagree with ``get``, nor shadow the methods."""
    from rocketscope.config import Settings

    settings = load_broker_config({"brokerName": "b-1", "maxMessageSize": "1024"})
    names = list(settings.as_dict())
    assert len(names) > 50
    for name in names:
        assert getattr(settings, name) == settings.get(name), name
    settings.set("maxMessageSize", 2048)
    assert settings.maxMessageSize == 2048 == settings.get("maxMessageSize")
    odd = Settings([], {"get": 1, "as_dict": 2, "plain": 3}, {})
    assert odd.get("get") == 1 and odd.as_dict() == {"get": 1, "as_dict": 2, "plain": 3} and odd.plain == 3
