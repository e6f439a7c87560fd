"""The official RocketMQ 5 clients' request signature, verified (and produced for our own tools).

Every request carries::

    x-mq-date-time: 20240102T030405Z
    authorization:  MQv2-HMAC-SHA1 Credential=<accessKey>, SignedHeaders=x-mq-date-time, Signature=<hex>

where ``Signature`` is hex(HMAC-SHA1(secretKey, x-mq-date-time)).  The signature covers only
the date header, so what stops a captured header from being replayed forever is a bound
on how far that date may be from the broker's clock (``aclClockSkewSeconds``).

The clients format the date from the *local* clock and still append ``Z`` (Python:
``datetime.now()``, Java: ``SimpleDateFormat`` in the default zone), so the broker cannot
know the zone.  We accept the date when it is within the bound of the broker's UTC time
or of the broker's local time: right for a client in UTC or in the broker's zone, which
covers correctly configured fleets; a client in a third zone is refused as expired, and
the refusal says by how much it is off.
"""

from __future__ import annotations

import calendar
import hashlib
import hmac
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

ALGORITHM = "MQv2-HMAC-SHA1"
DATE_HEADER = "x-mq-date-time"
AUTH_HEADER = "authorization"
DATE_FORMAT = "%Y%m%dT%H%M%SZ"
DEFAULT_SKEW_S = 900  # RocketMQ proxy's 15 minutes


class SignatureError(Exception):
    """Why a request's credentials were refused; ``kind`` is 'account' or 'signature'."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


@dataclass(frozen=True)
class Authorization:
    access_key: str
    signed_headers: tuple[str, ...]
    signature: str = ""

    def __repr__(self) -> str:  # never print the signature
        return f"Authorization(access_key={self.access_key!r}, signed_headers={self.signed_headers!r})"


def utc_now() -> datetime:
    """Naive UTC now (the request date carries no zone)."""
    return datetime.now(UTC).replace(tzinfo=None)


def sign(secret_key: str, date_time: str) -> str:
    return hmac.new(secret_key.encode("utf-8"), date_time.encode("utf-8"), hashlib.sha1).hexdigest()


def parse_authorization(value: str) -> Authorization:
    """Parse the authorization header; SignatureError('signature') when malformed."""
    algorithm, _, rest = value.strip().partition(" ")
    if algorithm != ALGORITHM:
        raise SignatureError("signature", f"authorization uses algorithm {algorithm[:32]!r}, expected {ALGORITHM}")
    fields: dict[str, str] = {}
    for part in rest.split(","):
        key, sep, val = part.strip().partition("=")
        if sep:
            fields[key.strip()] = val.strip()
    credential = fields.get("Credential")
    if credential is None or "Signature" not in fields:
        raise SignatureError("signature", "authorization lacks Credential or Signature")
    access_key = credential.split("/", 1)[0]  # old clients wrote Credential=<ak>/<date>/...
    signed = tuple(h.strip().lower() for h in fields.get("SignedHeaders", DATE_HEADER).split(";") if h.strip())
    return Authorization(access_key, signed, fields["Signature"])


def metadata_get(metadata: Sequence[tuple[str, str | bytes]] | None, key: str) -> str | None:
    for k, v in metadata or ():
        if k == key:
            return v if isinstance(v, str) else v.decode("utf-8", "replace")
    return None


def parse_date(text: str) -> datetime:
    try:
        return datetime.strptime(text, DATE_FORMAT)
    except ValueError:
        raise SignatureError("signature", f"{DATE_HEADER} {text[:32]!r} is not yyyyMMddTHHmmssZ") from None


def date_epoch(text: str) -> float:
    """The request date read as if it were UTC, in epoch seconds (a fast strptime: this runs per request)."""
    try:
        if len(text) != 16 or text[8] != "T" or text[15] != "Z" or not (text[:8] + text[9:15]).isdigit():
            raise ValueError(text)
        parts = (int(text[0:4]), int(text[4:6]), int(text[6:8]), int(text[9:11]), int(text[11:13]), int(text[13:15]))
        datetime(*parts)  # range check (month 13, hour 25, ...)
    except ValueError:
        raise SignatureError("signature", f"{DATE_HEADER} {text[:32]!r} is not yyyyMMddTHHmmssZ") from None
    return float(calendar.timegm(parts))


def skew_seconds(request_time: datetime, now_utc: datetime, now_local: datetime) -> float:
    """Smallest distance (s) of the naive request time from the broker's UTC and local clocks."""
    return min(abs((request_time - now_utc).total_seconds()), abs((request_time - now_local).total_seconds()))


_offset_cache = [0.0, 0]  # (valid until, local zone offset s)


def local_offset(now: float) -> int:
    """The local zone's UTC offset, re-read once a minute (daylight saving changes it)."""
    if now >= _offset_cache[0]:
        _offset_cache[0], _offset_cache[1] = now + 60, time.localtime(now).tm_gmtoff
    return int(_offset_cache[1])


def skew_of(request_epoch: float, now: float | None = None) -> float:
    """``skew_seconds`` for an epoch from ``date_epoch``, against time.time() and the local zone offset."""
    now = time.time() if now is None else now
    return min(abs(request_epoch - now), abs(request_epoch - (now + local_offset(now))))


def expired_error(date_text: str, off: float, max_skew_s: float) -> SignatureError:
    return SignatureError("signature", f"signature expired: {DATE_HEADER} {date_text} is {int(off)} s away "
                                       f"from the broker's clock (aclClockSkewSeconds={int(max_skew_s)})")


def check_fresh(date_text: str, max_skew_s: float, now_utc: datetime | None = None,
                now_local: datetime | None = None) -> float:
    """The request date's epoch; SignatureError('signature') when it is further than ``max_skew_s`` from the
    broker's UTC or local clock (0: no bound).  ``now_utc``/``now_local`` are for tests."""
    epoch = date_epoch(date_text)
    if max_skew_s <= 0:
        return epoch
    if now_utc is None or now_local is None:
        off = skew_of(epoch)
    else:
        off = skew_seconds(datetime.fromtimestamp(epoch, UTC).replace(tzinfo=None), now_utc, now_local)
    if off > max_skew_s:
        raise expired_error(date_text, off, max_skew_s)
    return epoch


def verify(auth: Authorization, date_text: str, secret_key: str) -> None:
    """SignatureError('signature') unless the signature is the HMAC of the date under ``secret_key``."""
    if DATE_HEADER not in auth.signed_headers:
        raise SignatureError("signature", f"authorization does not sign {DATE_HEADER}")
    expected = sign(secret_key, date_text)
    if not hmac.compare_digest(expected, auth.signature.strip().lower()):
        raise SignatureError("signature", f"signature does not match for access key {auth.access_key!r} "
                                          "(wrong secret key?)")


def client_metadata(access_key: str, secret_key: str, when: datetime | None = None) -> list[tuple[str, str]]:
    """The metadata the official client sends, for our own admin tools and broker-to-broker calls.

    ``when`` defaults to the current UTC time, which a broker in any zone accepts.
    """
    date_text = (when or utc_now()).strftime(DATE_FORMAT)
    return [(DATE_HEADER, date_text),
            (AUTH_HEADER, f"{ALGORITHM} Credential={access_key}, SignedHeaders={DATE_HEADER}, "
                          f"Signature={sign(secret_key, date_text)}")]

