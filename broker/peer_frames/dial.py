"""The client side of a framed peer port (broker/peer_frames/wire.py): connect, say hello, read the answer.

DLedger's links to the other members (broker/dledger/peer_link.py) and a slave's link to its master's
``haListenPort`` (broker/ha/slave.py) open their connections here, with the broker's client TLS settings
and its ``internalPeerSecret`` in the hello.
"""

from __future__ import annotations

import asyncio

from rocketscope.tls import TlsClientConfig

from . import wire

MAX_REPLY = 1 << 16  # a hello reply is one byte and a short text


class LinkRefused(Exception):
    """The port answered our hello with a refusal (wrong group, secret); the text is the port's reason."""


async def dial(address: str, tls: TlsClientConfig, greeting: bytes, protocol: str
               ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection to ``address`` ("host:port") whose hello (``greeting``: magic, version, hello frame) was
    accepted; LinkRefused with the port's reason, WireError if the answer is not ``protocol``'s reply."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    ctx = tls.ssl_client_context()
    server_hostname = (tls.server_name_override or host) if ctx is not None else None
    reader, writer = await asyncio.open_connection(host, int(port), ssl=ctx, server_hostname=server_hostname)
    try:
        writer.write(greeting)
        size = int.from_bytes(await reader.readexactly(4), "big")
        if size > MAX_REPLY:
            raise wire.WireError(f"the peer's hello reply claims {size} bytes: not {protocol}")
        error = wire.parse_reply(await reader.readexactly(size))
        if error:
            raise LinkRefused(error)
    except BaseException:
        writer.transport.abort()
        raise
    return reader, writer


def reason(exc: BaseException) -> str:
    """A link failure in the words of a log line ("connection refused", "not reachable", the refusal's text)."""
    if isinstance(exc, TimeoutError):
        return "not reachable"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    return str(exc) or type(exc).__name__
