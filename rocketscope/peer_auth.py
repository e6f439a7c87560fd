"""The shared secret of the replication ports (HA, DLedger Raft, controller Raft): ``internalPeerSecret``.

Those ports carry commit-log bytes and Raft messages: a process that reaches one could read
the whole log as a "slave" or append entries and votes as a "member".  Two checks keep an
outsider out, and they combine:

* **mutual TLS** (``tls.internal.need.client.auth=require``, rocketscope/tls.py): the
  handshake fails unless the peer presents a certificate of the cluster's CA;
* **a shared secret** (``internalPeerSecret``): all three ports speak framed TCP and the
  client's hello frame carries the secret (broker/peer_frames/port.py checks it with
  ``refusal`` below, before it even compares the group, so a stranger learns nothing).  It
  needs no PKI; without TLS the secret crosses the network in clear, so on an untrusted
  network use it together with TLS (tls.server.mode=enforcing).

The secret goes only into those hellos: until session 18 the outbound gRPC channels also
added it to every call's metadata for the controllers' gRPC Raft port; that port is gone,
and a secret sent to ports that do not check it (admin, proxy) would only spread it.  The
admin and client ports are not covered: they have ACL (aclEnable) and the client
certificate rules of their own.
"""

from __future__ import annotations

import hmac


def refusal(given: str, expected: bytes) -> str | None:
    """Why a hello's secret is refused (naming the missing or wrong secret), or None when it may pass.

    Constant-time comparison: the time a refusal takes says nothing about how much of the secret was right.
    """
    if not expected or hmac.compare_digest(given.encode(), expected):
        return None
    return "no peer secret" if not given else "a wrong peer secret"
