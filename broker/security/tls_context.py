"""An ``ssl.SSLContext`` for listeners that terminate TLS in Python (remoting), reloaded when its files change.

gRPC ports get certificate rotation from ``TlsServerConfig.server_credentials()`` (a stat
of the files at each handshake).  The remoting front door terminates TLS in asyncio, so it
needs the same behaviour from an ``ssl.SSLContext``: ``ReloadingSslContext.get()`` stats the
certificate, key and trust files and builds a new context when one changed.  A file that
no longer loads is logged and the previous context is kept, as on the gRPC side.
"""

from __future__ import annotations

import logging
import ssl
import threading

from rocketscope.tls import TlsServerConfig

log = logging.getLogger(__name__)


class ReloadingSslContext:
    """The server context of ``tls`` (``tls.server.*`` keys), rebuilt when its files change."""

    def __init__(self, tls: TlsServerConfig) -> None:
        self.tls = tls
        self._lock = threading.Lock()
        self._stamp = tls.files_stamp()
        self._ctx = tls.ssl_server_context()

    def get(self) -> ssl.SSLContext:
        stamp = self.tls.files_stamp()
        with self._lock:
            if stamp == self._stamp:
                return self._ctx
            self._stamp = stamp
            try:
                self._ctx = self.tls.ssl_server_context()
            except (OSError, ssl.SSLError, ValueError) as exc:
                log.error("TLS certificate reload failed, remoting keeps the previous certificate: %s", exc)
                return self._ctx
            log.info("TLS certificate files changed: new remoting connections get the new certificate")
            return self._ctx
