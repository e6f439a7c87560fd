"""The one console command, `rocketscope`, with RocketMQ's process names as subcommands."""

from __future__ import annotations

import asyncio
import sys

import click

from rocketscope.config import ConfigError, read_properties

from .client_package import defer_client_init
from .fast_exit import exit_process
from .lazy_group import LazyGroup
from .logs import setup_logging

# Commands whose modules pull heavy or optional packages (grpc admin stubs, the OpenTelemetry
# SDK, PySpark, Streamlit) are imported only when they run; see lazy_group.py for why.
LAZY_COMMANDS = {
    "admin": ("rocketscope.admin_cli:admin", "Administer a cluster like mqadmin."),
    "exporter": ("rocketscope.telemetry.cli:exporter", "Run the standalone metrics exporter."),
    "analyze": ("rocketscope.spark.cli:analyze", "Analyse trace and replication events with Spark.", "analytics"),
    "dashboard": ("rocketscope.dashboards.cli:dashboard", "Run the Streamlit dashboard.", "dashboard"),
    "traceServer": ("rocketscope.trace.cli:trace_server", "Serve trace lookups over HTTP."),
}


def _before_lazy_import(name: str) -> None:
    """None of the lazy commands uses the official client's package ``__init__`` (its Producer and
    consumers, their OpenTelemetry SDK): register it deferred, as the server commands do, so that e.g.
    every ``rocketscope admin`` call, tens per test run, does not import the client (client_package.py)."""
    defer_client_init()


@click.group(cls=LazyGroup, lazy_subcommands=LAZY_COMMANDS, before_import=_before_lazy_import)
@click.version_option(package_name="rocketscope")
def main() -> None:
    """RocketScope: a RocketMQ-compatible broker built to be observed."""


def _config_errors() -> tuple[type[Exception], ...]:
    """The errors a process command reports in one line (imported late: telemetry pulls the OTel SDK)."""
    from rocketscope.telemetry.config import TelemetryConfigError

    return (ConfigError, TelemetryConfigError, OSError)


def _load(path: str | None) -> dict[str, str]:
    return read_properties(path) if path else {}


@main.command()
@click.option("-c", "--config", "config_path", type=click.Path(dir_okay=False), help="namesrv.conf")
@click.option("-p", "--port", type=int, default=None, help="listen port (overrides listenPort)")
def namesrv(config_path: str | None, port: int | None) -> None:
    """Run a name server (mqnamesrv)."""
    defer_client_init()  # before the broker's imports: client_package.py says why
    from rocketscope.broker.namesrv.server import load_namesrv_config, run_namesrv

    setup_logging("namesrv")
    try:
        raw = _load(config_path)
        if port is not None:
            raw["listenPort"] = str(port)
        settings = load_namesrv_config(raw)
        asyncio.run(run_namesrv(settings))
    except _config_errors() as exc:
        click.echo(f"namesrv: {exc}", err=True)
        sys.exit(1)


@main.command()
@click.option("-c", "--config", "config_path", type=click.Path(dir_okay=False), help="broker.conf")
@click.option("-n", "--namesrvAddr", "namesrv", default=None, help="name servers (overrides namesrvAddr)")
def broker(config_path: str | None, namesrv: str | None) -> None:
    """Run a broker (mqbroker)."""
    defer_client_init()  # before the broker's imports: client_package.py says why
    from rocketscope.broker.broker import run_broker
    from rocketscope.broker.broker_config import load_broker_config

    setup_logging("broker")
    try:
        raw = _load(config_path)
        if namesrv:
            raw["namesrvAddr"] = namesrv
        settings = load_broker_config(raw)
        asyncio.run(run_broker(settings))
    except _config_errors() as exc:
        click.echo(f"broker: {exc}", err=True)
        sys.exit(1)


@main.command()
@click.option("-c", "--config", "config_path", type=click.Path(dir_okay=False), help="container.conf")
def container(config_path: str | None) -> None:
    """Run several brokers in one process (mqbrokercontainer)."""
    defer_client_init()  # before the broker's imports: client_package.py says why
    from rocketscope.broker.container import load_container_config, run_container

    setup_logging("container")
    try:
        asyncio.run(run_container(load_container_config(_load(config_path))))
    except _config_errors() as exc:
        click.echo(f"container: {exc}", err=True)
        sys.exit(1)


@main.command()
@click.option("-c", "--config", "config_path", type=click.Path(dir_okay=False), help="controller.conf")
def controller(config_path: str | None) -> None:
    """Run a controller of a controller group (mqcontroller)."""
    defer_client_init()  # before the broker's imports: client_package.py says why
    from rocketscope.broker.controller.config import load_controller_config
    from rocketscope.broker.controller.node import run_controller

    setup_logging("controller")
    try:
        asyncio.run(run_controller(load_controller_config(_load(config_path))))
    except _config_errors() as exc:
        click.echo(f"controller: {exc}", err=True)
        sys.exit(1)




@main.command()
@click.option("--quick", is_flag=True, help="seconds instead of minutes; check every part, then stop (tests)")
@click.option("--failover-after", type=float, default=60.0, show_default=True,
              help="seconds of traffic before the leader is killed")
@click.option("--no-dashboard", is_flag=True, help="do not start the dashboard")
@click.option("--dashboard-port", type=int, default=0, help="dashboard port (default: a free one)")
@click.option("--data-dir", default="", help="work directory (default: a new temporary one)")
@click.option("--keep-running/--exit", default=None,
              help="after the last step, keep the cluster and dashboard up until Ctrl-C [default: unless --quick]")
@click.option("--rate", type=float, default=20.0, show_default=True, help="messages per second")
@click.option("--screenshots", default="", metavar="DIR", help="save a PNG of every dashboard page in DIR (Chromium)")
def demo(quick: bool, failover_after: float, no_dashboard: bool, dashboard_port: int, data_dir: str,
         keep_running: bool | None, rate: float, screenshots: str) -> None:
    """A replicated cluster on loopback with traffic, a leader failover, Spark analytics and the dashboard."""
    from .demo import DemoOptions, run_demo

    sys.exit(run_demo(DemoOptions(quick=quick, failover_after_s=failover_after, dashboard=not no_dashboard,
                                  dashboard_port=dashboard_port, data_dir=data_dir, keep_running=keep_running,
                                  rate_per_s=rate, screenshots=screenshots)))


def run() -> None:
    """The console script: ``main`` as a process of its own, ended without the interpreter's module
    teardown once the command is done (0.6-1.3 s per process saved; fast_exit.py says why).  Tests
    invoke ``main`` or a command in-process and keep the ordinary ``SystemExit``."""
    try:
        main()
        code: object = 0
    except SystemExit as exc:
        code = exc.code
    exit_process(code)


if __name__ == "__main__":
    run()
