"""Trace records in Elasticsearch: one index per day, bulk writes, lookup by a term query.

``traceStore=elasticsearch`` (docs/TRACE.md) keeps trace records searchable for
longer and outside the brokers.  One document per record, with the record's fields
under their codec names plus ``type``; the document ``_id`` is a hash of the encoded
record, so a record written twice (dispatcher retry, at-least-once delivery) is stored
once.

Compatibility: the installed client is elasticsearch-py 9.x, whose typed APIs send
``compatible-with=9`` media types, which Elasticsearch 8 refuses ("Accept version must be
either version 8 or 7").  The 9.x client has no switch for that, so this store issues its
four request shapes through the client's documented low-level ``perform_request`` with
explicit ``application/vnd.elasticsearch+json; compatible-with=8`` (or ``+x-ndjson``)
headers, which the client passes through unchanged.  Elasticsearch 8 accepts version 8
and Elasticsearch 9 accepts 8 as its previous major, so one setting serves both.

This backend has only been tested against the in-process fake in
tests/test_trace_elasticsearch.py, never against a real cluster.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from elasticsearch import Elasticsearch

from rocketscope.trace.codec import TraceRecord, encode_record, record_from_dict, record_to_dict

log = logging.getLogger(__name__)

DEFAULT_INDEX_PREFIX = "rocketscope-trace"
DEFAULT_LOOKUP_LIMIT = 1000

_KEYWORD = {"type": "keyword"}
_MAPPINGS: dict[str, Any] = {
    "dynamic": False,
    "properties": {
        "type": _KEYWORD,
        "msg_id": _KEYWORD,
        "group": _KEYWORD,
        "topic": _KEYWORD,
        "timestamp": {"type": "date", "format": "epoch_millis"},
        "region_id": _KEYWORD,
        "request_id": _KEYWORD,
        "tags": _KEYWORD,
        "keys": {"type": "text", "analyzer": "whitespace"},
        "store_host": _KEYWORD,
        "client_host": _KEYWORD,
        "offset_msg_id": _KEYWORD,
        "transaction_id": _KEYWORD,
        "transaction_state": _KEYWORD,
        "success": {"type": "boolean"},
        "from_check": {"type": "boolean"},
        "body_length": {"type": "long"},
        "cost_time": {"type": "long"},
        "msg_type": {"type": "integer"},
        "retry_times": {"type": "integer"},
        "context_code": {"type": "integer"},
    },
}


class TraceStoreError(RuntimeError):
    """Elasticsearch refused some trace documents; the message gives the count and the first reason."""


def _compat_headers(version: int, ndjson: bool = False, body: bool = True) -> dict[str, str]:
    json_type = f"application/vnd.elasticsearch+json; compatible-with={version}"
    headers = {"accept": json_type}
    if body:
        headers["content-type"] = (
            f"application/vnd.elasticsearch+x-ndjson; compatible-with={version}" if ndjson else json_type
        )
    return headers


class ElasticsearchTraceStore:
    """Write and look up trace records in ``<index_prefix>-YYYY.MM.DD`` indices."""

    def __init__(
        self,
        hosts: str | Sequence[str],
        username: str | None = None,
        password: str | None = None,
        index_prefix: str = DEFAULT_INDEX_PREFIX,
        api_key: str | tuple[str, str] | None = None,
        *,
        compatible_with: int = 8,
        client: Elasticsearch | None = None,
        **client_options: Any,
    ) -> None:
        """``client_options`` go to ``Elasticsearch(...)`` (``ca_certs``, ``verify_certs``, ``request_timeout``...)."""
        if not index_prefix or index_prefix != index_prefix.lower() or any(c in index_prefix for c in ' "*\\/,|<>?#'):
            raise ValueError(f"index_prefix must be a lower-case Elasticsearch index name part, got {index_prefix!r}")
        if (username is None) != (password is None):
            raise ValueError("give both username and password, or neither")
        self.index_prefix = index_prefix
        self.compatible_with = compatible_with
        if client is None:
            auth: dict[str, Any] = {}
            if username is not None:
                auth["basic_auth"] = (username, password)
            if api_key is not None:
                auth["api_key"] = api_key
            client = Elasticsearch(hosts if not isinstance(hosts, str) else [hosts], **auth, **client_options)
        self.client = client

    # -- naming -------------------------------------------------------------------------

    @property
    def template_name(self) -> str:
        return self.index_prefix

    @property
    def index_pattern(self) -> str:
        return f"{self.index_prefix}-*"

    def index_for(self, record: TraceRecord, now_ms: int | None = None) -> str:
        """The daily index of a record, by its timestamp in UTC; records without one (old SubAfter) go by now."""
        ts = record.timestamp if record.timestamp > 0 else (
            now_ms if now_ms is not None else int(datetime.now(UTC).timestamp() * 1000))
        day = datetime.fromtimestamp(ts / 1000, UTC)
        return f"{self.index_prefix}-{day:%Y.%m.%d}"

    @staticmethod
    def document_id(record: TraceRecord) -> str:
        return hashlib.sha1(encode_record(record).encode("utf-8")).hexdigest()

    # -- operations ---------------------------------------------------------------------

    def _request(self, method: str, path: str, body: Any = None, *, ndjson: bool = False,
                 params: dict[str, Any] | None = None) -> Any:
        response = self.client.perform_request(
            method, path, params=params, body=body,
            headers=_compat_headers(self.compatible_with, ndjson=ndjson, body=body is not None),
        )
        return response.body

    def ensure_template(self) -> None:
        """Create or replace the index template for ``<prefix>-*`` (idempotent)."""
        template = {
            "index_patterns": [self.index_pattern],
            "priority": 200,
            "template": {"mappings": _MAPPINGS},
            "_meta": {"managed_by": "rocketscope.trace"},
        }
        self._request("PUT", f"/_index_template/{self.template_name}", template)

    def write(self, records: Iterable[TraceRecord], *, refresh: bool = False) -> int:
        """Bulk-index records; returns how many were stored.  Raises :class:`TraceStoreError`
        when any document was refused (the others stay written; writing again is safe)."""
        lines: list[dict[str, Any]] = []
        for record in records:
            lines.append({"index": {"_index": self.index_for(record), "_id": self.document_id(record)}})
            lines.append(record_to_dict(record))
        if not lines:
            return 0
        params = {"refresh": "true"} if refresh else None
        result = self._request("POST", "/_bulk", lines, ndjson=True, params=params)
        items = result.get("items", [])
        failures = [item.get("index", {}) for item in items if "error" in item.get("index", {})]
        if result.get("errors") or failures:
            first = failures[0].get("error") if failures else "unknown"
            raise TraceStoreError(f"Elasticsearch refused {len(failures)} of {len(items)} trace documents: {first}")
        return len(items)

    def lookup(self, msg_id: str, *, limit: int = DEFAULT_LOOKUP_LIMIT) -> list[TraceRecord]:
        """Every stored record of ``msg_id`` across the daily indices, oldest first."""
        query = {
            "query": {"term": {"msg_id": msg_id}},
            "size": limit,
            "sort": [{"timestamp": {"order": "asc", "unmapped_type": "date"}}],
        }
        result = self._request(
            "POST", f"/{self.index_pattern}/_search", query,
            params={"ignore_unavailable": "true", "allow_no_indices": "true"},
        )
        records: list[TraceRecord] = []
        for hit in result.get("hits", {}).get("hits", []):
            try:
                record = record_from_dict(hit.get("_source", {}))
            except (ValueError, TypeError) as exc:
                log.warning("skipping trace document %s in %s: %s", hit.get("_id"), hit.get("_index"), exc)
                continue
            if record.msg_id == msg_id:
                records.append(record)
        return records

    def close(self) -> None:
        self.client.close()
