"""`rocketscope traceServer`: the trace lookup as a JSON HTTP endpoint.

    GET /api/trace/<msgId>[?traceTopic=RMQ_SYS_TRACE_TOPIC]   -> 200 the timeline (Timeline.to_dict())
    GET /healthz                                               -> 200 ok

Errors are JSON too, ``{"error": "...", "msgId": "..."}``: 400 for a malformed message ID,
404 when nothing is known about it (the reason says whether the trace topic is missing,
tracing is off or the ID is unknown), 503 when the cluster cannot be reached.  The
standard library's threading HTTP server is enough here: one lookup per request, each on
its own thread with its own event loop; a web framework would add a dependency for no gain.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from rocketscope.names import TRACE_TOPIC
from rocketscope.trace.lookup import TraceLookup, TraceLookupError

log = logging.getLogger(__name__)
MSG_ID = re.compile(r"^[0-9A-Za-z_.:-]{1,128}$")
NOT_FOUND_PREFIXES = ("unknown message id", "no trace records", "trace topic")


def lookup_response(namesrv: str, msg_id: str, trace_topic: str, es_store: Any = None) -> tuple[int, dict[str, Any]]:
    """(HTTP status, JSON document) for one lookup; never raises."""
    if not MSG_ID.match(msg_id):
        return 400, {"error": "msgId must be 1-128 letters, digits or _ . : - (the msgId of the send result)",
                     "msgId": msg_id[:128]}
    try:
        timeline = asyncio.run(TraceLookup(namesrv, es_store=es_store).lookup(msg_id, trace_topic))
    except TraceLookupError as exc:
        status = 404 if str(exc).startswith(NOT_FOUND_PREFIXES) else 503
        return status, {"error": str(exc), "msgId": msg_id}
    except Exception as exc:  # the cluster is down, a broker timed out ...
        return 503, {"error": f"lookup failed: {exc}", "msgId": msg_id}
    return 200, timeline.to_dict()


def make_handler(namesrv: str, es_store: Any = None) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            url = urllib.parse.urlsplit(self.path)
            if url.path == "/healthz":
                self._reply(200, {"status": "ok"})
                return
            if not url.path.startswith("/api/trace/"):
                self._reply(404, {"error": "use GET /api/trace/<msgId>"})
                return
            msg_id = urllib.parse.unquote(url.path[len("/api/trace/"):])
            query = urllib.parse.parse_qs(url.query)
            topic = (query.get("traceTopic") or [TRACE_TOPIC])[-1]
            status, doc = lookup_response(namesrv, msg_id, topic, es_store)
            log.info("trace lookup %s -> %d", msg_id[:64], status)
            self._reply(status, doc)

        def _reply(self, status: int, doc: dict[str, Any]) -> None:
            body = json.dumps(doc, default=str).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # one INFO line per lookup instead
            pass

    return Handler


def serve(namesrv: str, host: str, port: int, es_store: Any = None) -> ThreadingHTTPServer:
    """A started-but-not-serving server (call ``serve_forever``); ``port=0`` picks one.  With ``es_store``
    the trace records come from Elasticsearch (traceStore=elasticsearch)."""
    server = ThreadingHTTPServer((host, port), make_handler(namesrv, es_store))
    server.daemon_threads = True
    return server
