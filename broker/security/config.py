"""The security keys in one place: their declarations (for the config loader and
docs/CONFIG.md) and ``SecurityConfig``, built from a process's raw properties."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rocketscope import signature as sig
from rocketscope.config import ConfigError, Key, bool_key, non_negative, positive
from rocketscope.names import TRACE_TOPIC
from rocketscope.tls import TlsClientConfig, TlsServerConfig, client_config, server_config, start_metrics_server

from .acl import AclError
from .guard import AclGuard, Counter
from .watcher import FileWatcher

_MODES = ("DISABLED", "PERMISSIVE", "ENFORCING")
_AUTH = ("NONE", "OPTIONAL", "REQUIRE")

SECURITY_KEYS: list[Key] = [
    Key("tls.server.mode", str, "disabled", "TLS on every listener: disabled, permissive (TLS and plaintext on "
        "one port) or enforcing (TLS only)", choices=_MODES),
    Key("tls.server.certPath", str, "", "PEM certificate (chain) the listeners present"),
    Key("tls.server.keyPath", str, "", "PEM private key of tls.server.certPath"),
    Key("tls.server.keyPassword", str, "", "password of an encrypted tls.server.keyPath"),
    Key("tls.server.trustCertPath", str, "", "PEM CA(s) client certificates must chain to"),
    Key("tls.server.need.client.auth", str, "none", "client certificates on the client port: none, optional "
        "(not requested on gRPC ports) or require", choices=_AUTH),
    Key("tls.internal.need.client.auth", str, "", "client certificates on the admin, HA, Raft and controller "
        "ports (RocketScope; default: tls.server.need.client.auth)", choices=("", *_AUTH)),
    Key("tls.metrics.enable", bool, False, "serve /metrics over HTTPS with the tls.server pair (RocketScope)"),
    Key("tls.enable", str, "auto", "the broker's own outbound connections use TLS: true, false or auto (on when "
        "tls.server.mode is not disabled)", choices=("AUTO", "TRUE", "FALSE")),
    Key("tls.client.certPath", str, "", "PEM certificate outbound connections present (mutual TLS)"),
    Key("tls.client.keyPath", str, "", "PEM private key of tls.client.certPath"),
    Key("tls.client.keyPassword", str, "", "password of an encrypted tls.client.keyPath"),
    Key("tls.client.trustCertPath", str, "", "PEM CA(s) to verify servers with (default: the system store)"),
    Key("tls.client.authServer", bool, True, "verify servers; gRPC always does, false only logs a warning"),
    Key("tls.client.serverNameOverride", str, "", "name to verify server certificates against instead of the "
        "address (RocketScope)"),
    Key("aclEnable", bool, False, "check every client and admin request against the ACL file"),
    Key("aclFile", str, "", "plain_acl.yml-style ACL file (RocketScope; required with aclEnable)"),
    Key("aclClockSkewSeconds", int, sig.DEFAULT_SKEW_S, "how far a request's x-mq-date-time may be from the "
        "broker's clock; 0 disables the bound (RocketScope)", check=non_negative),
    Key("aclFileWatchIntervalMillis", int, 1000, "how often the ACL file is checked for changes (RocketScope)",
        check=positive),
    Key("internalPeerSecret", str, "", "shared secret every broker and controller of the cluster presents on the HA "
        "and Raft ports (and accepts only from peers that present it); empty: no secret check, use mutual TLS "
        "(tls.internal.need.client.auth=require) instead (RocketScope)"),
    Key("innerClientAuthenticationCredentials", str, "", 'JSON {"accessKey":..., "secretKey":...} the broker '
        "signs its own admin calls with (slave and follower metadata sync)"),
]
SECURITY_KEY_NAMES = frozenset(k.name for k in SECURITY_KEYS)
# the keys a process without ACL (name server, controller) accepts: TLS on its listener and /metrics
TLS_KEYS: list[Key] = [k for k in SECURITY_KEYS if k.name.startswith("tls.") or k.name == "internalPeerSecret"]


def _int(raw: Mapping[str, str], key: str, default: int, minimum: int) -> int:
    text = (raw.get(key) or "").strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(f"config key {key} has bad value {text!r}: expected an integer") from None
    if value < minimum:
        raise ConfigError(f"config key {key} has bad value {text!r}: must be at least {minimum}")
    return value


@dataclass(frozen=True)
class SecurityConfig:
    server_tls: TlsServerConfig = field(default_factory=TlsServerConfig)
    client_tls: TlsClientConfig = field(default_factory=TlsClientConfig)
    acl_enable: bool = False
    acl_file: str = ""
    clock_skew_s: int = sig.DEFAULT_SKEW_S
    watch_interval_s: float = 1.0
    inner_access_key: str = ""
    inner_secret_key: str = field(default="", repr=False)

    @classmethod
    def from_properties(cls, raw: Mapping[str, str], *, validate: bool = True) -> SecurityConfig:
        """Parse the security keys; with ``validate`` also read every certificate and key file
        (ConfigError names the key), so a bad file stops start-up instead of the first handshake."""
        server = server_config(raw)
        client = client_config(raw, server)
        ak = sk = ""
        inner = (raw.get("innerClientAuthenticationCredentials") or "").strip()
        if inner:
            try:
                creds = json.loads(inner)
                ak, sk = str(creds["accessKey"]), str(creds["secretKey"])
            except (ValueError, KeyError, TypeError):
                raise ConfigError('config key innerClientAuthenticationCredentials must be JSON '
                                  '{"accessKey": "...", "secretKey": "..."}') from None
        cfg = cls(server, client, bool_key(raw, "aclEnable", False), (raw.get("aclFile") or "").strip(),
                  _int(raw, "aclClockSkewSeconds", sig.DEFAULT_SKEW_S, 0),
                  _int(raw, "aclFileWatchIntervalMillis", 1000, 1) / 1000, ak, sk)
        if validate:
            server.validate()
            client.validate()
            if cfg.acl_enable and not cfg.acl_file:
                raise ConfigError("aclEnable=true needs aclFile (the plain_acl.yml to enforce)")
        return cfg

    def guard(self, trace_topic: str = TRACE_TOPIC, denied_counter: Counter | None = None
              ) -> AclGuard | None:
        """The AclGuard when aclEnable, else None; ConfigError when the ACL file is missing or bad."""
        if not self.acl_enable:
            return None
        try:
            return AclGuard.from_file(self.acl_file, trace_topic=trace_topic, max_skew_s=self.clock_skew_s,
                                      denied_counter=denied_counter)
        except AclError as exc:
            raise ConfigError(f"config key aclFile: {exc}") from None

    def watcher(self, guard: AclGuard) -> FileWatcher:
        """Reloads ``guard`` when the ACL file changes; ``start()`` it on the event loop."""
        return FileWatcher(self.acl_file, guard.reload, self.watch_interval_s)

    def metrics_serve(self) -> Callable[[int, str, Any], tuple[Any, Any]] | None:
        """The HTTPS server for PROM mode's /metrics when tls.metrics.enable is on, else None (plain HTTP)."""
        tls = self.server_tls
        if not tls.metrics_https:
            return None
        return lambda port, host, registry: start_metrics_server(port, host, registry, tls)

    def inner_metadata(self) -> list[tuple[str, str]]:
        """Signed metadata for the broker's own admin calls (fresh date each call); [] without credentials."""
        if not self.inner_access_key:
            return []
        return sig.client_metadata(self.inner_access_key, self.inner_secret_key)


def describe(cfg: SecurityConfig) -> dict[str, Any]:
    """What is on, for the start-up log line (no secrets)."""
    return {"tls": cfg.server_tls.mode.value, "clientAuth": cfg.server_tls.need_client_auth.value,
            "outboundTls": cfg.client_tls.enabled, "acl": cfg.acl_enable}
