"""The metadata of the request being handled, read from grpc once per request.

``ServicerContext.invocation_metadata()`` converts grpc's metadata into new Python tuples on
every call, and a SendMessage used to call it five or six times (client id, language,
version, the trace header, the forwarding and slave-read headers): about 7 % of the
broker's CPU in the produce benchmark's profile.  The first call in a request's task builds
a dict and keeps it in a context variable; grpc.aio runs every RPC in its own task, so the
value never leaks into another request, and the context identity is checked anyway.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

SLAVE_READ_HEADER = "x-rocketscope-slave-read"
"""Marks a pull the master relayed to an in-sync slave (broker/slave_read.py): the slave serves it itself
instead of forwarding it back (broker/forwarding.py)."""

_CURRENT: ContextVar[tuple[Any, dict[str, str]] | None] = ContextVar("rocketscope_request_metadata", default=None)


def request_metadata(context: Any) -> dict[str, str]:
    """Text metadata of ``context``'s request, first value of each key (binary values decoded leniently)."""
    cached = _CURRENT.get()
    if cached is not None and cached[0] is context:
        return cached[1]
    md: dict[str, str] = {}
    for key, value in context.invocation_metadata() or ():
        if key not in md:
            md[key] = value if isinstance(value, str) else value.decode("utf-8", "replace")
    _CURRENT.set((context, md))
    return md
