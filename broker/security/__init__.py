"""Security for RocketScope: TLS on every listener, RocketMQ-style ACL with signed requests.

What the broker wires (docs/SECURITY.md has the full contract)::

    sec = SecurityConfig.from_properties(settings.raw)           # ConfigError on bad keys/files
    guard = sec.guard(s.msgTraceTopicName, telemetry.counter("rocketmq_acl_denied_total"))
    server = grpc.aio.server(interceptors=[AclInterceptor(guard)] if guard else [])
    listener = bind_listener(server, "grpcServerPort", "127.0.0.1", 8081, sec.server_tls)  # internal: .for_internal()
    await server.start(); await listener.start()
    sec.watcher(guard).start()
    channel = sec.client_tls.channel("10.0.0.2:10911")            # outbound

The TLS settings, request signatures and peer authentication that clients, the exporter and the CLI
use too live in the common leaf (rocketscope/tls.py, rocketscope/signature.py, rocketscope/peer_auth.py);
this package is the broker's side: ACLs, the guard and the listeners.
"""

from __future__ import annotations

from .acl import AclConfig, AclError, Perm, load_acl, parse_acl
from .config import SECURITY_KEY_NAMES, SECURITY_KEYS, SecurityConfig
from .guard import AclGuard, Decision
from .interceptor import AclInterceptor
from .listener import Listener, bind_listener, bind_server, host_port, real_peer
from .watcher import FileWatcher

__all__ = [
    "SECURITY_KEYS", "SECURITY_KEY_NAMES", "AclConfig", "AclError", "AclGuard", "AclInterceptor", "Decision",
    "FileWatcher", "Listener", "Perm", "SecurityConfig", "bind_listener", "bind_server", "host_port", "load_acl",
    "parse_acl", "real_peer",
]
