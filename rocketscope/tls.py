"""TLS settings (RocketMQ's ``tls.*`` keys) and the credentials built from them.

Server side: ``TlsServerConfig.server_credentials()`` gives grpc.aio servers credentials
that re-read the certificate, key and trust files when they change (checked at each new
handshake, so a renewed certificate is served without a restart; established
connections keep theirs).  Client side: ``TlsClientConfig.channel(target)`` opens the
broker's own outbound channels (name server, replication, Raft, forwarding, admin) with
TLS when ``tls.enable`` is on.  ``ssl_server_context`` serves the same pair over HTTPS
(/metrics, the exporter's HTTP receiver).

grpc's Python API can either require and verify a client certificate or not ask for one;
it cannot ask and accept its absence.  ``need.client.auth=optional`` therefore does not
request a certificate on gRPC ports (it does on HTTPS ports, where Python's ssl can);
nothing in RocketScope authorises by certificate identity, so the only visible
difference from RocketMQ is that an optional certificate is not verified.
"""

from __future__ import annotations

import logging
import os
import ssl
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from enum import Enum
from pathlib import Path
from typing import Any

import grpc

from rocketscope.config import ConfigError, bool_key

log = logging.getLogger(__name__)


class TlsMode(Enum):
    DISABLED = "disabled"
    PERMISSIVE = "permissive"
    ENFORCING = "enforcing"


class ClientAuth(Enum):
    NONE = "none"
    OPTIONAL = "optional"
    REQUIRE = "require"


def _enum(raw: Mapping[str, str], key: str, cls: type[Enum], default: Enum) -> Any:
    text = (raw.get(key) or "").strip().lower()
    if not text:
        return default
    try:
        return cls(text)
    except ValueError:
        choices = ", ".join(str(m.value) for m in cls)  # type: ignore[attr-defined]
        raise ConfigError(f"config key {key} has bad value {raw[key]!r}: expected one of {choices}") from None


def _bool(raw: Mapping[str, str], key: str, default: bool) -> bool:
    """A boolean TLS key; ``auto`` (tls.enable's documented value) is the default, as absent is."""
    if (raw.get(key) or "").strip().lower() == "auto":
        return default
    return bool_key(raw, key, default)


def _read(key: str, path: str) -> bytes:
    try:
        return Path(path).expanduser().read_bytes()
    except OSError as exc:
        raise ConfigError(f"config key {key} names {path!r}, which cannot be read: {exc.strerror}") from None


def load_certificates(key: str, path: str) -> bytes:
    # cryptography is imported here, not at the top: only TLS needs it, and it cost every process
    # ~0.1 CPU s at start (tests/test_lazy_imports.py keeps it out of a default server)
    from cryptography.x509 import load_pem_x509_certificates

    data = _read(key, path)
    try:
        if not load_pem_x509_certificates(data):
            raise ValueError("no certificate")
    except ValueError:
        raise ConfigError(f"config key {key}: {path} holds no PEM certificate") from None
    return data


def load_private_key(key: str, path: str, password: str | None, password_key: str) -> bytes:
    """The key as unencrypted PKCS#8 PEM (gRPC takes no password); decrypted in memory only."""
    from cryptography.hazmat.primitives import serialization  # only TLS needs it: see load_certificates

    data = _read(key, path)
    try:
        pk = serialization.load_pem_private_key(data, password.encode() if password else None)
    except TypeError:
        if password:
            pk = serialization.load_pem_private_key(data, None)  # a password for a plain key is harmless
        else:
            raise ConfigError(f"config key {key}: {path} is encrypted; set {password_key}") from None
    except ValueError:
        raise ConfigError(f"config key {key}: {path} is not a PEM private key, or {password_key} is wrong") from None
    return pk.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())


@dataclass(frozen=True)
class TlsServerConfig:
    mode: TlsMode = TlsMode.DISABLED
    cert_path: str = ""
    key_path: str = ""
    key_password: str = ""
    trust_cert_path: str = ""
    need_client_auth: ClientAuth = ClientAuth.NONE
    internal_need_client_auth: ClientAuth = ClientAuth.NONE
    metrics_https: bool = False

    def __repr__(self) -> str:  # never print the key password
        return (f"TlsServerConfig(mode={self.mode.value}, cert_path={self.cert_path!r}, key_path={self.key_path!r}, "
                f"trust_cert_path={self.trust_cert_path!r}, need_client_auth={self.need_client_auth.value}, "
                f"internal_need_client_auth={self.internal_need_client_auth.value})")

    @property
    def enabled(self) -> bool:
        return self.mode is not TlsMode.DISABLED

    def for_internal(self) -> TlsServerConfig:
        """The same pair for the internal ports (admin, HA, Raft, controller), with their client-auth rule."""
        return replace(self, need_client_auth=self.internal_need_client_auth)

    def validate(self) -> None:
        """ConfigError naming the key when a file is missing or unusable (checked at start-up)."""
        if not self.enabled:
            return
        if not self.cert_path or not self.key_path:
            raise ConfigError(f"tls.server.mode={self.mode.value} needs tls.server.certPath and tls.server.keyPath")
        self._material()
        if ClientAuth.REQUIRE in (self.need_client_auth, self.internal_need_client_auth) and not self.trust_cert_path:
            raise ConfigError("need.client.auth=require needs tls.server.trustCertPath (the CA of client certificates)")

    def _material(self) -> tuple[bytes, bytes, bytes | None]:
        cert = load_certificates("tls.server.certPath", self.cert_path)
        key = load_private_key("tls.server.keyPath", self.key_path, self.key_password or None,
                               "tls.server.keyPassword")
        trust = load_certificates("tls.server.trustCertPath", self.trust_cert_path) if self.trust_cert_path else None
        return cert, key, trust

    def files_stamp(self) -> tuple[tuple[int, int], ...]:
        out = []
        for p in (self.cert_path, self.key_path, self.trust_cert_path):
            try:
                st = os.stat(p) if p else None
            except OSError:
                st = None
            out.append((st.st_mtime_ns, st.st_ino) if st else (0, 0))
        return tuple(out)

    def server_credentials(self) -> grpc.ServerCredentials:
        """Credentials for ``add_secure_port``; the files are re-read when they change."""
        require = self.need_client_auth is ClientAuth.REQUIRE
        if self.need_client_auth is ClientAuth.OPTIONAL:
            log.info("need.client.auth=optional: gRPC ports do not request client certificates (see SECURITY.md)")
        lock = threading.Lock()
        state = {"stamp": self.files_stamp()}

        def configuration() -> grpc.ServerCertificateConfiguration:
            cert, key, trust = self._material()
            return grpc.ssl_server_certificate_configuration([(key, cert)], root_certificates=trust)

        def fetch() -> grpc.ServerCertificateConfiguration | None:
            # runs on a gRPC core thread at each handshake: a stat of three files, a reload when they changed
            stamp = self.files_stamp()
            with lock:
                if stamp == state["stamp"]:
                    return None
                state["stamp"] = stamp
            try:
                cfg = configuration()
            except ConfigError as exc:
                log.error("TLS certificate reload failed, serving the previous certificate: %s", exc)
                return None
            log.info("TLS certificate files changed: new connections get the new certificate")
            return cfg

        return grpc.dynamic_ssl_server_credentials(configuration(), fetch, require_client_authentication=require)

    def ssl_server_context(self) -> ssl.SSLContext:
        """An ssl context for HTTPS listeners (/metrics, the exporter's HTTP receiver)."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(self.cert_path, self.key_path, password=self.key_password or None)
        if self.need_client_auth is not ClientAuth.NONE and self.trust_cert_path:
            ctx.load_verify_locations(self.trust_cert_path)
            ctx.verify_mode = (ssl.CERT_REQUIRED if self.need_client_auth is ClientAuth.REQUIRE
                               else ssl.CERT_OPTIONAL)
        return ctx


@dataclass(frozen=True)
class TlsClientConfig:
    enabled: bool = False
    cert_path: str = ""
    key_path: str = ""
    key_password: str = ""
    trust_cert_path: str = ""
    server_name_override: str = ""
    peer_secret: str = ""  # internalPeerSecret: sent in the replication ports' hellos (rocketscope/peer_auth.py)

    def __repr__(self) -> str:  # never print the key password or the peer secret
        return (f"TlsClientConfig(enabled={self.enabled}, cert_path={self.cert_path!r}, key_path={self.key_path!r}, "
                f"trust_cert_path={self.trust_cert_path!r}, server_name_override={self.server_name_override!r})")

    def validate(self) -> None:
        if self.enabled:
            self.credentials()
        if bool(self.cert_path) != bool(self.key_path):
            raise ConfigError("tls.client.certPath and tls.client.keyPath must be given together")

    def credentials(self) -> grpc.ChannelCredentials:
        trust = load_certificates("tls.client.trustCertPath", self.trust_cert_path) if self.trust_cert_path else None
        key = cert = None
        if self.cert_path and self.key_path:
            cert = load_certificates("tls.client.certPath", self.cert_path)
            key = load_private_key("tls.client.keyPath", self.key_path, self.key_password or None,
                                   "tls.client.keyPassword")
        return grpc.ssl_channel_credentials(root_certificates=trust, private_key=key, certificate_chain=cert)

    def ssl_client_context(self) -> ssl.SSLContext | None:
        """The ``ssl`` equivalent of ``credentials()`` for links that do TLS in asyncio (DLedger's Raft port,
        broker/dledger/peer_link.py); None when ``tls.enable`` is off.  The server's certificate is verified
        against ``tls.client.trustCertPath`` (else the system's CAs) and the host name, as gRPC does."""
        if not self.enabled:
            return None
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        if self.trust_cert_path:
            ctx.load_verify_locations(cadata=load_certificates("tls.client.trustCertPath",
                                                               self.trust_cert_path).decode())
        else:
            ctx.load_default_certs()
        if self.cert_path and self.key_path:
            ctx.load_cert_chain(self.cert_path, self.key_path, password=self.key_password or None)
        return ctx

    def channel(self, target: str, options: Sequence[tuple[str, Any]] = ()) -> grpc.aio.Channel:
        """A grpc.aio channel to ``target``: TLS when ``tls.enable`` is on, else plaintext."""
        opts = list(options)
        if not self.enabled:
            return grpc.aio.insecure_channel(target, options=opts)
        if self.server_name_override:
            opts.append(("grpc.ssl_target_name_override", self.server_name_override))
        return grpc.aio.secure_channel(target, self.credentials(), options=opts)

    def sync_channel(self, target: str, options: Sequence[tuple[str, Any]] = ()) -> grpc.Channel:
        opts = list(options)
        if not self.enabled:
            return grpc.insecure_channel(target, options=opts)
        if self.server_name_override:
            opts.append(("grpc.ssl_target_name_override", self.server_name_override))
        return grpc.secure_channel(target, self.credentials(), options=opts)


def server_config(raw: Mapping[str, str]) -> TlsServerConfig:
    need = _enum(raw, "tls.server.need.client.auth", ClientAuth, ClientAuth.NONE)
    return TlsServerConfig(
        mode=_enum(raw, "tls.server.mode", TlsMode, TlsMode.DISABLED),
        cert_path=(raw.get("tls.server.certPath") or "").strip(),
        key_path=(raw.get("tls.server.keyPath") or "").strip(),
        key_password=raw.get("tls.server.keyPassword") or "",
        trust_cert_path=(raw.get("tls.server.trustCertPath") or "").strip(),
        need_client_auth=need,
        internal_need_client_auth=_enum(raw, "tls.internal.need.client.auth", ClientAuth, need),
        metrics_https=_bool(raw, "tls.metrics.enable", False))


def client_config(raw: Mapping[str, str], server: TlsServerConfig | None = None) -> TlsClientConfig:
    server = server or server_config(raw)
    if not _bool(raw, "tls.client.authServer", True):
        log.warning("tls.client.authServer=false is not supported by gRPC: server certificates are verified")
    return TlsClientConfig(
        enabled=_bool(raw, "tls.enable", server.enabled),
        cert_path=(raw.get("tls.client.certPath") or "").strip(),
        key_path=(raw.get("tls.client.keyPath") or "").strip(),
        key_password=raw.get("tls.client.keyPassword") or "",
        trust_cert_path=(raw.get("tls.client.trustCertPath") or "").strip(),
        server_name_override=(raw.get("tls.client.serverNameOverride") or "").strip(),
        peer_secret=(raw.get("internalPeerSecret") or "").strip())


def start_metrics_server(port: int, addr: str, registry: Any, tls: TlsServerConfig) -> tuple[Any, threading.Thread]:
    """prometheus_client's start_http_server, but HTTPS with our context (key password, optional client auth).
    ``registry`` is a prometheus_client registry or a WSGI app (PROM mode's own /metrics app)."""
    from wsgiref.simple_server import WSGIRequestHandler, make_server

    from prometheus_client import exposition

    class Server(exposition.ThreadingWSGIServer):
        pass

    family, addr = exposition._get_best_family(addr, port)  # type: ignore[attr-defined]
    Server.address_family = family
    handler = getattr(exposition, "_SilentHandler", WSGIRequestHandler)
    app = registry if callable(registry) else exposition.make_wsgi_app(registry)
    httpd = make_server(addr, port, app, Server, handler_class=handler)
    httpd.socket = tls.ssl_server_context().wrap_socket(httpd.socket, server_side=True)
    thread = threading.Thread(target=httpd.serve_forever, name="metrics-https", daemon=True)
    thread.start()
    return httpd, thread
