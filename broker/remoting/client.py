"""A small blocking remoting client: tests, tools and benchmarks speak raw frames through it."""

from __future__ import annotations

import itertools
import socket
import ssl
import struct

from .codec import JSON, RemotingCommand, decode, encode

_I32 = struct.Struct(">i")


class RemotingClient:
    """One connection; ``invoke`` sends a request and returns the response with the same opaque."""

    def __init__(self, addr: str, timeout_s: float = 10.0, language: str = "PYTHON", version: int = 479,
                 tls: ssl.SSLContext | None = None) -> None:
        """``tls``: speak TLS (remoting over TLS, tls.server.mode permissive or enforcing) with this context."""
        host, _, port = addr.rpartition(":")
        sock = socket.create_connection((host, int(port)), timeout=timeout_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock: socket.socket = tls.wrap_socket(sock, server_hostname=host) if tls is not None else sock
        self.language = language
        self.version = version
        self._opaque = itertools.count(1)
        self.unmatched: list[RemotingCommand] = []  # server-initiated requests seen while waiting

    def __enter__(self) -> RemotingClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_frame(self) -> RemotingCommand:
        (length,) = _I32.unpack(self._read(4))
        return decode(self._read(length))

    def _read(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError(f"connection closed after {len(buf)} of {n} bytes")
            buf += chunk
        return bytes(buf)

    def request(self, code: int, ext_fields: dict[str, str] | None = None, body: bytes = b"",
                serialize_type: int = JSON, oneway: bool = False) -> RemotingCommand:
        return RemotingCommand(code=code, ext_fields=ext_fields, body=body, opaque=next(self._opaque),
                               flag=2 if oneway else 0, language=self.language, version=self.version,
                               serialize_type=serialize_type)

    def invoke(self, code: int, ext_fields: dict[str, str] | None = None, body: bytes = b"",
               serialize_type: int = JSON) -> RemotingCommand:
        req = self.request(code, ext_fields, body, serialize_type)
        self.send_raw(encode(req))
        while True:
            resp = self.read_frame()
            if resp.is_response and resp.opaque == req.opaque:
                return resp
            self.unmatched.append(resp)

    def oneway(self, code: int, ext_fields: dict[str, str] | None = None, body: bytes = b"") -> None:
        self.send_raw(encode(self.request(code, ext_fields, body, oneway=True)))
