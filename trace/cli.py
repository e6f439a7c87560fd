"""``queryMsgTraceById``: print one message's trace like mqadmin does, or the timeline as JSON."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime
from typing import Any

import click

from rocketscope.names import TRACE_TOPIC
from rocketscope.trace.lookup import TraceLookup, TraceLookupError
from rocketscope.trace.timeline import Timeline

_ROW = "{:<28} {:<34} {:<8} {:<8} {:<24} {:<8}"


def es_options(f: Any) -> Any:
    """--es-* options: read trace records from Elasticsearch (brokers with traceStore=elasticsearch)."""
    for opt in reversed([
        click.option("--es-hosts", default="", help="Elasticsearch URLs, comma-separated: look the records up there"),
        click.option("--es-username", default=None), click.option("--es-password", default=None),
        click.option("--es-api-key", default=None),
        click.option("--es-index-prefix", default="rocketscope-trace", show_default=True),
    ]):
        f = opt(f)
    return f


def es_store(es_hosts: str, es_username: str | None, es_password: str | None, es_api_key: str | None,
             es_index_prefix: str) -> Any:
    if not es_hosts:
        return None
    from rocketscope.trace.elasticsearch_store import ElasticsearchTraceStore

    try:
        return ElasticsearchTraceStore([h.strip() for h in es_hosts.split(",") if h.strip()], username=es_username,
                                       password=es_password, index_prefix=es_index_prefix, api_key=es_api_key,
                                       request_timeout=10)
    except ValueError as e:
        raise click.BadParameter(str(e)) from e


def _ts(ms: int | None) -> str:
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def render_table(tl: Timeline) -> str:
    lines = [f"msgId: {tl.msg_id}  topic: {tl.topic}  tags: {tl.tags or '-'}  keys: {tl.keys or '-'}", ""]
    lines.append(_ROW.format("#Type", "#ProducerGroup", "#Cost", "#Retry", "#Time", "#Status"))
    for s in tl.sends:
        lines.append(_ROW.format("Pub", s.group or "-", f"{s.cost_time}ms", "-", _ts(s.begin), s.status))
    for g in tl.groups:
        lines.append("")
        lines.append(_ROW.format("#Type", "#ConsumerGroup", "#Cost", "#Retry", "#Time", "#Status"))
        for d in g.deliveries:
            cost = "-" if d.cost_time is None else f"{d.cost_time}ms"
            retry = "-" if d.retry_times is None else str(d.retry_times)
            lines.append(_ROW.format("Sub", g.group, cost, retry, _ts(d.begin if d.begin is not None else d.end),
                                     d.status))
        if g.dlq is not None:
            lines.append(_ROW.format("DLQ", g.group, "-", "-", _ts(g.dlq.timestamp), "FAILED"))
    for w in tl.warnings:
        lines.append(f"warning: {w}")
    return "\n".join(lines)


@click.command("queryMsgTraceById")
@click.option("-n", "--namesrv", required=True, help="name server address")
@click.option("-i", "--msg-id", "msg_id", required=True, help="message id (UNIQ_KEY)")
@click.option("-t", "--trace-topic", default=TRACE_TOPIC, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="print the timeline as JSON")
@es_options
def query_msg_trace_by_id(namesrv: str, msg_id: str, trace_topic: str, as_json: bool, **es: Any) -> None:
    """Show the trace of one message."""
    try:
        tl = asyncio.run(TraceLookup(namesrv, es_store=es_store(**es)).lookup(msg_id, trace_topic))
    except TraceLookupError as e:
        raise click.ClickException(str(e)) from e
    if as_json:
        click.echo(json.dumps(tl.to_dict(), indent=2, default=str))
    else:
        click.echo(render_table(tl))


@click.command("traceServer")
@click.option("-n", "--namesrv", required=True, help="name server address(es), host:port;host:port")
@click.option("--host", default="127.0.0.1", show_default=True, help="address to listen on")
@click.option("--port", default=8090, show_default=True, type=int)
@es_options
def trace_server(namesrv: str, host: str, port: int, **es: Any) -> None:
    """Serve trace lookups as JSON: GET /api/trace/<msgId>."""
    import logging

    from rocketscope.trace.http_api import serve

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    server = serve(namesrv, host, port, es_store(**es))
    click.echo(f"trace lookups on http://{host}:{server.server_address[1]}/api/trace/<msgId>", err=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
