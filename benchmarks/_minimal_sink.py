"""The yardstick the ingest issue names: a minimal Python OTLP/HTTP sink that stores spans in chDB — not ragmon.

It does what the issue's "60-line Python sink" does and nothing more: parse each request with the protobuf
classes, read three attributes per span, append one JSON row per span, and insert the rows into a plain MergeTree
table in chDB every 0.2 s. No write-ahead log, no normalisation of dialects, no attribute maps, no rollups, no
tail sampler, no judge. `benchmarks/ingest.py --sink minimal` drives it with the same senders as the agent, and
`--against minimal-sink` alternates the two, so ragmon's throughput reads against it in one sitting.

    POST /v1/traces   ExportTraceServiceRequest (protobuf) -> 200
    GET  /count       {"spans": rows stored and queryable}

On start it prints `PORT <n>` on stdout.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from chdb import state
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

_KEYS = ("ragmon.feature", "ragmon.stage", "gen_ai.request.model")
_TABLE = """CREATE TABLE IF NOT EXISTS spans (trace_id String, span_id String, name String, start_ns UInt64,
    duration_ms Float64, feature String, stage String, model String) ENGINE = MergeTree ORDER BY (feature, stage)"""


def json_rows(body: bytes) -> list[str]:
    request = ExportTraceServiceRequest.FromString(body)
    rows = []
    for resource_spans in request.resource_spans:
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                found = {kv.key: kv.value.string_value for kv in span.attributes if kv.key in _KEYS}
                row = {
                    "trace_id": span.trace_id.hex(),
                    "span_id": span.span_id.hex(),
                    "name": span.name,
                    "start_ns": span.start_time_unix_nano,
                    "duration_ms": (span.end_time_unix_nano - span.start_time_unix_nano) / 1e6,
                    "feature": found.get(_KEYS[0], ""),
                    "stage": found.get(_KEYS[1], ""),
                    "model": found.get(_KEYS[2], ""),
                }
                rows.append(json.dumps(row))
    return rows


class Sink:
    def __init__(self, path: str) -> None:
        self.writer, self.reader = state.connect(path), state.connect(path)
        self.writer.query(_TABLE, "Null")
        self.pending: list[str] = []
        self.lock = threading.Lock()
        threading.Thread(target=self.flush_forever, daemon=True).start()

    def flush_forever(self) -> None:
        while True:
            time.sleep(0.2)
            with self.lock:
                rows, self.pending = self.pending, []
            if rows:
                inserter = self.writer.send_insert("INSERT INTO spans", "JSONEachRow")
                inserter.append("\n".join(rows).encode())
                inserter.finish()

    def count(self) -> int:
        return int(self.reader.query("SELECT count() FROM spans", "CSV").bytes())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--data-dir", required=True)
    args = parser.parse_args()
    sink = Sink(args.data_dir)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as the senders expect

        def do_POST(self) -> None:
            rows = json_rows(self.rfile.read(int(self.headers["Content-Length"])))
            with sink.lock:
                sink.pending.extend(rows)
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_GET(self) -> None:
            body = json.dumps({"spans": sink.count()}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    print(f"PORT {server.server_address[1]}", flush=True)
    sys.stdout.flush()
    server.serve_forever()


if __name__ == "__main__":
    main()
