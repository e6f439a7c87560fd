"""The Elasticsearch trace backend against an in-process fake of an Elasticsearch 8 node."""

from __future__ import annotations

import base64
import fnmatch
import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from elasticsearch import BadRequestError, Elasticsearch

from rocketscope.trace.codec import PubRecord, RecallRecord, SubAfterRecord, SubBeforeRecord
from rocketscope.trace.elasticsearch_store import ElasticsearchTraceStore, TraceStoreError


class FakeElasticsearch8:
    """A tiny stand-in for one Elasticsearch 8 node: index templates, _bulk and _search only.

    No Elasticsearch server can be installed where these tests run, so this fake is all the
    backend has been run against; it has NOT been tested against a real cluster.  What the
    fake checks is what ES 8 is strict about and what our store relies on:

    * media types: ``compatible-with`` must be 7 or 8, else the 400
      ``media_type_header_exception`` ES 8 answers to the 9.x client's defaults;
    * the bulk body is newline-delimited JSON of ``index`` actions with ``_index`` and ``_id``,
      each followed by a document whose fields match the template's mapping types;
    * search is a ``term`` query that only matches ``keyword`` fields, over comma-separated
      index patterns, with ``size`` and a ``sort`` on one field.

    Responses carry ``X-Elastic-Product: Elasticsearch`` (the client refuses servers without
    it) and the shapes ES 8 returns.  ``fail_bulk_ids`` makes chosen documents fail.
    """

    def __init__(self) -> None:
        self.templates: dict[str, dict[str, Any]] = {}
        self.indices: dict[str, dict[str, dict[str, Any]]] = {}
        self.requests: list[dict[str, Any]] = []
        self.fail_bulk_ids: set[str] = set()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                url = urlsplit(self.path)
                request = {"method": self.command, "path": url.path, "params": parse_qs(url.query),
                           "headers": {k.lower(): v for k, v in self.headers.items()}, "body": raw}
                fake.requests.append(request)
                status, body, compat = fake.dispatch(request)
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("X-Elastic-Product", "Elasticsearch")
                content_type = f"application/vnd.elasticsearch+json;compatible-with={compat}" if compat \
                    else "application/json"
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_HEAD = _handle

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    # -- protocol -----------------------------------------------------------------------

    @staticmethod
    def _error(status: int, type_: str, reason: str, caused_by: dict | None = None) -> tuple[int, dict, None]:
        error: dict[str, Any] = {"root_cause": [{"type": type_, "reason": reason}], "type": type_, "reason": reason}
        if caused_by:
            error["caused_by"] = caused_by
        return status, {"error": error, "status": status}, None

    def _compat(self, headers: dict[str, str]) -> tuple[int | None, tuple | None]:
        versions = set()
        for name in ("accept", "content-type"):
            value = headers.get(name, "")
            if "compatible-with=" in value:
                versions.add(int(value.split("compatible-with=")[1].split(";")[0].strip()))
        bad = [v for v in versions if v not in (7, 8)]
        if bad:
            return None, self._error(
                400, "media_type_header_exception", "Invalid media-type value on headers [Accept, Content-Type]",
                {"type": "status_exception",
                 "reason": f"Accept version must be either version 8 or 7, but found {bad[0]}. "
                           f"Accept={headers.get('accept')}"})
        return (max(versions) if versions else None), None

    def dispatch(self, req: dict[str, Any]) -> tuple[int, Any, int | None]:
        compat, error = self._compat(req["headers"])
        if error:
            return error
        parts = [p for p in req["path"].split("/") if p]
        if req["method"] == "PUT" and len(parts) == 2 and parts[0] == "_index_template":
            status, body = self._put_template(parts[1], json.loads(req["body"]))
        elif req["method"] == "POST" and parts == ["_bulk"]:
            if "x-ndjson" not in req["headers"].get("content-type", ""):
                status, body, _ = self._error(400, "illegal_argument_exception", "bulk needs x-ndjson")
            else:
                status, body = self._bulk(req["body"].decode())
        elif req["method"] in ("GET", "POST") and len(parts) == 2 and parts[1] == "_search":
            status, body = self._search(parts[0], json.loads(req["body"] or b"{}"), req["params"])
        else:
            status, body, _ = self._error(400, "illegal_argument_exception", f"no handler for {req['path']}")
        return status, body, compat

    def _put_template(self, name: str, body: dict[str, Any]) -> tuple[int, Any]:
        patterns = body.get("index_patterns")
        properties = body.get("template", {}).get("mappings", {}).get("properties")
        if not isinstance(patterns, list) or not isinstance(properties, dict):
            return self._error(400, "action_request_validation_exception", "index_patterns and mappings")[:2]
        self.templates[name] = body
        return 200, {"acknowledged": True}

    def mapping_for(self, index: str) -> dict[str, Any]:
        matching = [t for t in self.templates.values()
                    if any(fnmatch.fnmatchcase(index, p) for p in t["index_patterns"])]
        matching.sort(key=lambda t: t.get("priority", 0))
        return matching[-1]["template"]["mappings"]["properties"] if matching else {}

    @staticmethod
    def _type_ok(kind: str, value: Any) -> bool:
        if kind in ("keyword", "text"):
            return isinstance(value, str)
        if kind == "boolean":
            return isinstance(value, bool)
        if kind in ("long", "integer", "date"):
            return isinstance(value, int) and not isinstance(value, bool)
        return True

    def _bulk(self, text: str) -> tuple[int, Any]:
        lines = text.split("\n")
        if lines[-1] != "":
            return self._error(400, "illegal_argument_exception",
                               "The bulk request must be terminated by a newline [\\n]")[:2]
        lines = lines[:-1]
        items = []
        for action_line, doc_line in zip(lines[::2], lines[1::2], strict=True):
            action = json.loads(action_line)
            assert list(action) == ["index"], action
            meta = action["index"]
            index, doc_id = meta["_index"], meta["_id"]
            doc = json.loads(doc_line)
            mapping = self.mapping_for(index)
            bad = [f for f, v in doc.items() if f in mapping and not self._type_ok(mapping[f]["type"], v)]
            if doc_id in self.fail_bulk_ids or bad:
                reason = f"failed to parse field [{bad[0]}]" if bad else "injected failure"
                items.append({"index": {"_index": index, "_id": doc_id, "status": 400,
                                        "error": {"type": "document_parsing_exception", "reason": reason}}})
                continue
            existed = doc_id in self.indices.get(index, {})
            self.indices.setdefault(index, {})[doc_id] = doc
            items.append({"index": {"_index": index, "_id": doc_id, "_version": 1,
                                    "result": "updated" if existed else "created", "status": 200 if existed else 201,
                                    "_shards": {"total": 2, "successful": 1, "failed": 0},
                                    "_seq_no": 0, "_primary_term": 1}})
        return 200, {"took": 1, "errors": any("error" in i["index"] for i in items), "items": items}

    def _search(self, target: str, body: dict[str, Any], params: dict[str, list[str]]) -> tuple[int, Any]:
        names = [n for n in self.indices if any(fnmatch.fnmatchcase(n, p) for p in target.split(","))]
        if not names and params.get("allow_no_indices") != ["true"]:
            return self._error(404, "index_not_found_exception", f"no such index [{target}]")[:2]
        term = body.get("query", {}).get("term")
        assert isinstance(term, dict) and len(term) == 1, body
        [(field, wanted)] = term.items()
        if isinstance(wanted, dict):
            wanted = wanted["value"]
        hits = []
        for name in names:
            if self.mapping_for(name).get(field, {}).get("type") != "keyword":
                continue  # an analysed or unmapped field: a term query finds nothing
            for doc_id, doc in self.indices[name].items():
                if doc.get(field) == wanted:
                    hits.append({"_index": name, "_id": doc_id, "_score": None, "_source": doc})
        for spec in reversed(body.get("sort", [])):
            [(sort_field, order)] = spec.items()
            reverse = (order.get("order") if isinstance(order, dict) else order) == "desc"
            hits.sort(key=lambda h, f=sort_field: h["_source"].get(f, 0), reverse=reverse)
        size = body.get("size", 10)
        return 200, {"took": 1, "timed_out": False,
                     "_shards": {"total": len(names), "successful": len(names), "skipped": 0, "failed": 0},
                     "hits": {"total": {"value": len(hits), "relation": "eq"}, "max_score": None,
                              "hits": hits[:size]}}


@pytest.fixture
def fake() -> Iterator[FakeElasticsearch8]:
    server = FakeElasticsearch8()
    server.thread.start()
    try:
        yield server
    finally:
        server.server.shutdown()
        server.server.server_close()


@pytest.fixture
def store(fake: FakeElasticsearch8) -> Iterator[ElasticsearchTraceStore]:
    s = ElasticsearchTraceStore(fake.url)
    yield s
    s.close()


MID = "AC1415116D1418B4AAC217FE1B4E0000"
DAY1 = int(datetime(2025, 3, 9, 23, 59, 59, tzinfo=UTC).timestamp() * 1000)
DAY2 = DAY1 + 2000  # just after midnight UTC


def records() -> list:
    return [
        PubRecord(DAY1, "R", "PID", "orders", MID, "tag", "k1 k2", "10.0.0.1:10911", 10, 3, 0, "OFF", True),
        SubBeforeRecord(DAY2, "R", "CID", "REQ", MID, 0, "k1 k2"),
        SubAfterRecord("REQ", MID, 4, True, "k1 k2", 0, DAY2 + 4, "CID"),
        RecallRecord(DAY2, "R", "PID", "orders", "OTHER", True),
    ]


def test_template_shape(store: ElasticsearchTraceStore, fake: FakeElasticsearch8) -> None:
    store.ensure_template()
    store.ensure_template()  # idempotent
    template = fake.templates["rocketscope-trace"]
    assert template["index_patterns"] == ["rocketscope-trace-*"]
    props = template["template"]["mappings"]["properties"]
    for name in ("msg_id", "group", "topic", "type"):
        assert props[name] == {"type": "keyword"}
    assert props["timestamp"]["type"] == "date"


def test_requests_use_compatible_with_8(store: ElasticsearchTraceStore, fake: FakeElasticsearch8) -> None:
    store.ensure_template()
    store.write(records())
    store.lookup(MID)
    put, bulk, search = fake.requests
    for req in (put, bulk, search):
        assert req["headers"]["accept"] == "application/vnd.elasticsearch+json; compatible-with=8"
    assert put["headers"]["content-type"] == "application/vnd.elasticsearch+json; compatible-with=8"
    assert bulk["headers"]["content-type"] == "application/vnd.elasticsearch+x-ndjson; compatible-with=8"


def test_the_client_defaults_are_refused_by_es8(fake: FakeElasticsearch8) -> None:
    # Why the store sets its own headers: the 9.x client's typed APIs send compatible-with=9.
    client = Elasticsearch(fake.url)
    with pytest.raises(BadRequestError, match="media_type_header_exception"):
        client.search(index="rocketscope-trace-*", query={"term": {"msg_id": MID}})
    client.close()
    with pytest.raises(BadRequestError):
        ElasticsearchTraceStore(fake.url, compatible_with=9).ensure_template()


def test_bulk_into_daily_indices(store: ElasticsearchTraceStore, fake: FakeElasticsearch8) -> None:
    store.ensure_template()
    assert store.write(records()) == 4
    bulk = fake.requests[-1]
    lines = bulk["body"].decode().split("\n")
    assert lines[-1] == "" and len(lines) == 9
    actions = [json.loads(line) for line in lines[:-1:2]]
    assert [a["index"]["_index"] for a in actions] == [
        "rocketscope-trace-2025.03.09", "rocketscope-trace-2025.03.10",
        "rocketscope-trace-2025.03.10", "rocketscope-trace-2025.03.10"]
    first_doc = json.loads(lines[1])
    assert first_doc["type"] == "Pub" and first_doc["msg_id"] == MID and first_doc["timestamp"] == DAY1
    assert len({a["index"]["_id"] for a in actions}) == 4


def test_lookup_by_msg_id_across_days(store: ElasticsearchTraceStore, fake: FakeElasticsearch8) -> None:
    store.ensure_template()
    store.write(records())
    found = store.lookup(MID)
    assert found == records()[:3]  # oldest first; the other message's record is not returned
    search = fake.requests[-1]
    assert search["path"] == "/rocketscope-trace-*/_search"
    assert json.loads(search["body"])["query"] == {"term": {"msg_id": MID}}


def test_lookup_without_any_index_is_empty(store: ElasticsearchTraceStore) -> None:
    assert store.lookup(MID) == []


def test_writing_twice_stores_once(store: ElasticsearchTraceStore, fake: FakeElasticsearch8) -> None:
    store.ensure_template()
    store.write(records())
    store.write(records())
    assert sum(len(docs) for docs in fake.indices.values()) == 4
    assert len(store.lookup(MID)) == 3


def test_refused_documents_raise_with_the_reason(store: ElasticsearchTraceStore, fake: FakeElasticsearch8) -> None:
    store.ensure_template()
    fake.fail_bulk_ids.add(store.document_id(records()[1]))
    with pytest.raises(TraceStoreError, match=r"refused 1 of 4 trace documents.*injected failure"):
        store.write(records())


def test_sub_after_without_timestamp_goes_to_the_current_day(store: ElasticsearchTraceStore) -> None:
    old = SubAfterRecord("REQ", MID, 4, True, "", 0)
    now = int(datetime(2031, 1, 2, tzinfo=UTC).timestamp() * 1000)
    assert store.index_for(old, now_ms=now) == "rocketscope-trace-2031.01.02"


def test_empty_write_sends_nothing(store: ElasticsearchTraceStore, fake: FakeElasticsearch8) -> None:
    assert store.write([]) == 0 and fake.requests == []


def test_credentials(fake: FakeElasticsearch8) -> None:
    ElasticsearchTraceStore(fake.url, username="elastic", password="s3cret").lookup(MID)
    assert fake.requests[-1]["headers"]["authorization"] == "Basic " + base64.b64encode(b"elastic:s3cret").decode()
    ElasticsearchTraceStore(fake.url, api_key="a2V5OnNlY3JldA==").lookup(MID)
    assert fake.requests[-1]["headers"]["authorization"] == "ApiKey a2V5OnNlY3JldA=="


def test_bad_configuration() -> None:
    with pytest.raises(ValueError, match="index_prefix"):
        ElasticsearchTraceStore("http://127.0.0.1:1", index_prefix="Trace*")
    with pytest.raises(ValueError, match="username and password"):
        ElasticsearchTraceStore("http://127.0.0.1:1", username="elastic")
