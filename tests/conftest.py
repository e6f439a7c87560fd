"""Shared fixtures: free loopback ports, and one SparkSession per test run."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import NoReturn

import pytest

# A test that starts a process must be marked e2e (tests/process_guard.py says why).
pytest_plugins = ["process_guard"]


def missing_install(message: str) -> NoReturn:
    """A peer or tool `make test` installs is missing: a failure where it could have been
    installed (CI, or root), a visible skip naming the make target for an unprivileged local run."""
    if os.environ.get("CI") or os.geteuid() == 0:
        pytest.fail(message)
    pytest.skip(message + " (skipped: not root and CI is unset)")


def free_port() -> int:
    """A TCP port that is free on 127.0.0.1 right now and was not handed out before (rocketscope.ports)."""
    from rocketscope.ports import free_port as pick

    return pick()


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """One local SparkSession for the whole run, with the start-up-cutting settings of spark/session.py."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master("local[2]")
        .appName("rocketscope-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "512m")
        .config("spark.driver.extraJavaOptions", "-XX:+UseSerialGC -XX:TieredStopAtLevel=1")
        .config("spark.sql.session.timeZone", "UTC")
    )
    from rocketscope.spark.session import TABLE_CONF, cache_conf, jar_conf

    # how the jobs write their tables, and the JVM trace decoder and cache serializer (spark/jvm) when
    # `make` built them
    for key, value in {**TABLE_CONF, **jar_conf(), **cache_conf()}.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="session")
def apache_rocketmq(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """One Apache RocketMQ 5.3.3 name server + broker + proxy for the whole run (tests/peers_support.py)."""
    from peers_support import reference_cluster

    yield from reference_cluster(tmp_path_factory)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> object:
    """Keep each phase's report on the item, so a fixture's teardown can print process logs
    when the test itself failed (``failed_call(request)``)."""
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


def failed_call(request: pytest.FixtureRequest) -> bool:
    report = getattr(request.node, "rep_call", None)
    return bool(report is not None and report.failed)
