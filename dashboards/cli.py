"""`rocketscope dashboard`: run the Streamlit app (mounted by the lead into rocketscope.cli)."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import click

APP = Path(__file__).resolve().parent / "RocketScope.py"


def streamlit_argv(port: int, address: str) -> list[str]:
    return [sys.executable, "-m", "streamlit", "run", str(APP),
            "--server.headless", "true", "--server.address", address, "--server.port", str(port),
            "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none",
            # no "Deploy" button (Streamlit Community Cloud) in the toolbar of a product page
            "--client.toolbarMode", "minimal"]


@click.command("dashboard")
@click.option("-n", "--namesrv", envvar="ROCKETSCOPE_NAMESRV", default="", help="name server host:port[;host:port]")
@click.option("--prometheus", envvar="ROCKETSCOPE_PROMETHEUS", default="", help="Prometheus base URL")
@click.option("--analytics", envvar="ROCKETSCOPE_ANALYTICS", default="",
              type=click.Path(file_okay=False), help="output directory of `rocketscope analyze`")
@click.option("--port", default=8501, show_default=True, type=int)
@click.option("--address", default="127.0.0.1", show_default=True, help="address to listen on")
@click.option("--fixtures", is_flag=True, help="built-in demo data instead of live sources")
def dashboard(namesrv: str, prometheus: str, analytics: str, port: int, address: str, fixtures: bool) -> None:
    """Open the RocketScope dashboards (Streamlit) on http://ADDRESS:PORT."""
    if importlib.util.find_spec("streamlit") is None:  # checked here: the app runs in a child process
        raise click.ClickException("the dashboard needs Streamlit, which is not installed: "
                                   "pip install 'rocketscope[dashboard]'")
    env = dict(os.environ)
    env.update({"ROCKETSCOPE_NAMESRV": namesrv, "ROCKETSCOPE_PROMETHEUS": prometheus,
                "ROCKETSCOPE_ANALYTICS": analytics, "ROCKETSCOPE_FIXTURES": "1" if fixtures else ""})
    if not (namesrv or fixtures):
        click.echo("no --namesrv given: cluster, trace and consumer pages show fixtures", err=True)
    click.echo(f"RocketScope dashboards on http://{address}:{port}", err=True)
    argv = streamlit_argv(port, address)
    os.execvpe(argv[0], argv, env)


if __name__ == "__main__":
    dashboard()
