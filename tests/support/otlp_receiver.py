"""A tiny OTLP/HTTP trace receiver for tests: ``POST /v1/traces`` with an ExportTraceServiceRequest
(protobuf, gzip or not), decoded with opentelemetry-proto into plain span dicts. It runs on a thread
of the test process, so worker processes export to it exactly as they would to a collector."""

from __future__ import annotations

import gzip
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

__all__ = ["OtlpReceiver", "decode"]


def _value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return tuple(_value(x) for x in v.array_value.values)
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in v.kvlist_value.values}
    return getattr(v, kind) if kind else None


def decode(body: bytes) -> list[dict[str, Any]]:
    """The spans of one export request: hex ids, name, kind, times (ns), attributes, events,
    status code and the resource's attributes."""
    req = ExportTraceServiceRequest()
    req.ParseFromString(body)
    out: list[dict[str, Any]] = []
    for rs in req.resource_spans:
        resource = {kv.key: _value(kv.value) for kv in rs.resource.attributes}
        for ss in rs.scope_spans:
            for s in ss.spans:
                out.append({
                    "traceId": s.trace_id.hex(),
                    "spanId": s.span_id.hex(),
                    "parentSpanId": s.parent_span_id.hex(),
                    "name": s.name,
                    "kind": s.kind,
                    "start": s.start_time_unix_nano,
                    "end": s.end_time_unix_nano,
                    "attributes": {kv.key: _value(kv.value) for kv in s.attributes},
                    "events": [{"name": e.name, "attributes": {kv.key: _value(kv.value) for kv in e.attributes}}
                               for e in s.events],
                    "status": s.status.code,
                    "resource": resource,
                })  # fmt: skip
    return out


class OtlpReceiver:
    """Start with ``with OtlpReceiver() as r:``; ``r.endpoint`` for OTEL_EXPORTER_OTLP_ENDPOINT,
    ``r.spans`` what arrived, ``r.requests`` the raw request bodies (to record)."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self.requests: list[bytes] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                ok = self.path == "/v1/traces"
                if ok:
                    spans = decode(body)
                    with receiver.lock:
                        receiver.requests.append(body)
                        receiver.spans.extend(spans)
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200 if ok else 404)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> OtlpReceiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def snapshot(self) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.spans)
