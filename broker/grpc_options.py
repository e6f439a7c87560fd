"""Options every gRPC server of RocketScope is built with.

gRPC turns SO_REUSEPORT on by default on Linux, so a second server (another broker, or the
same broker configured with grpcServerPort == listenPort) binds a port that is already
taken *without an error*, and the kernel then splits connections between the two: clients
see UNIMPLEMENTED or talk to the wrong node.  A broker must own its ports, so we turn it off
and a taken port fails at start-up with a clear "cannot bind" message instead.
"""

from __future__ import annotations

from typing import Any

NO_REUSEPORT: tuple[str, Any] = ("grpc.so_reuseport", 0)


def server_options(*extra: tuple[str, Any]) -> list[tuple[str, Any]]:
    """``extra`` plus the options every server needs (see the module docstring)."""
    return [NO_REUSEPORT, *extra]
