"""Store throughput: span inserts per method side by side (medians), then the report over a large fill.

    /work/venv/bin/python benchmarks/store_insert.py [--requests 10000] [--repeats 5] [--fill-rows 10000000]
        [--otlp-bodies 100] [--only otlp,insert,report] [--redaction on|off|compare]

OTLP path (the product path since normalisation moved into SQL): pre-encoded request bodies of 100 traces × 5
spans (the SDK's attribute names, captured question/passages/answer), sealed into envelopes and stored with one
`Store.insert_otlp` per batch of `--otlp-bodies` bodies through `ragmon.sinks.otlp_views`'s views → `spans`,
`span_content`; measured through chDB and through the loopback HTTP endpoint. (Since store v5 the rollups are
not on the insert path: the agent rolls a range up after sampling, `Store.roll_up`.)
`--redaction` sets the views' PII redaction (`ragmon.sinks.redaction`; the agent's default is on); `compare`
stores the same batches with redaction off and on, in two databases, alternating which goes first, and prints
wall and CPU (all threads: the engine runs in-process) per span side by side with their ratio.

Columnar inserts of `spans` rows (each into the real schema; the tests' path, `tests/support/span_rows.py`, which
shares the store's Arrow encoding and insert settings with its payload, score and alert inserts):
- `insert_spans` (chDB): SpanBatch lists → Arrow → ArrowStream, plus the dedup token;
- the same split into its two halves: conversion only, and the engine alone on pre-encoded Arrow;
- `insert_spans` over clickhouse-connect to the loopback ClickHouse-HTTP endpoint.
The fill uses INSERT … SELECT from numbers() (the engine generates rows; it measures the report, not Python),
each chunk rolled up after it is stored.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `tests.support` when run as a script

from ragmon.sinks import open_store
from ragmon.sinks.arrow import to_ipc_stream, to_table
from ragmon.sinks.inserts import INSERT_SETTINGS
from ragmon.sinks.store import Store

from ragmon.model import SPAN_COLUMNS
from tests.support.chhttp import ClickHouseHttpServer
from tests.support.span_rows import batch_token, insert_spans
from tests.support.synth import encode_otlp_request, make_batch, otlp_traces


def _median_rate(rows: int, repeats: int, run: Callable[[int], object]) -> float:
    times = []
    for i in range(repeats):
        started = time.perf_counter()
        run(i)
        times.append(time.perf_counter() - started)
    return rows / statistics.median(times)


def bench_inserts(data_dir: str, requests: int, repeats: int) -> None:
    batches = [make_batch(requests, seed=100 + i) for i in range(repeats)]
    rows = len(batches[0])
    print(f"insert: {rows} spans per batch, median of {repeats}")
    store = open_store(data_dir, database="bench_insert")
    results = {}
    results["insert_spans (chDB, Arrow)"] = _median_rate(rows, repeats, lambda i: insert_spans(store, batches[i]))
    results["  conversion only (lists → Arrow IPC + token)"] = _median_rate(
        rows, repeats, lambda i: (to_ipc_stream(to_table(batches[i].columns(), SPAN_COLUMNS)), batch_token(batches[i]))
    )
    tables = [to_table(b.columns(), SPAN_COLUMNS) for b in batches]
    spans = store._ddl.table("spans")
    results["  engine only (pre-built Arrow, fresh tokens)"] = _median_rate(
        rows,
        repeats,
        lambda i: store.backend.insert(spans, tables[i], {**INSERT_SETTINGS, "insert_deduplication_token": f"e{i}"}),
    )
    # Side by side: the same with ReplacingMergeTree's merge-on-insert pass left on (the previous default).
    results["  engine only, optimize_on_insert = 1 (before)"] = _median_rate(
        rows,
        repeats,
        lambda i: store.backend.insert(
            spans, tables[i], {**INSERT_SETTINGS, "optimize_on_insert": 1, "insert_deduplication_token": f"o{i}"}
        ),
    )
    store.close()
    with ClickHouseHttpServer(data_dir) as server:
        remote = open_store(server.url, database="bench_insert_http")
        fresh = [make_batch(requests, seed=200 + i) for i in range(repeats)]
        results["insert_spans (clickhouse-connect → loopback HTTP)"] = _median_rate(
            rows, repeats, lambda i: insert_spans(remote, fresh[i])
        )
        remote.close()
    for name, rate in results.items():
        print(f"  {name:58s} {rate:>12,.0f} rows/s")


def _redaction(mode: str) -> Any:
    from ragmon.sinks.redaction import DEFAULT, DISABLED

    return DEFAULT if mode == "on" else DISABLED


def _install_real_sql(store: Store, redaction_mode: str = "on") -> None:
    from ragmon.sinks import otlp_views

    otlp_views.install(store, redaction=_redaction(redaction_mode))


def bench_redaction(data_dir: str, sealed: list[list[bytes]], spans: int) -> None:
    """The same batches into two databases, redaction off and on, alternating which goes first per repeat."""
    stores = {mode: open_store(data_dir, database=f"bench_redaction_{mode}") for mode in ("off", "on")}
    for mode, store in stores.items():
        _install_real_sql(store, mode)
    wall: dict[str, list[float]] = {"off": [], "on": []}
    cpu: dict[str, list[float]] = {"off": [], "on": []}
    for i, batch in enumerate(sealed):
        for mode in ("off", "on") if i % 2 == 0 else ("on", "off"):
            w0, c0 = time.perf_counter(), time.process_time()
            stores[mode].insert_otlp(batch, f"r{i}")
            wall[mode].append(time.perf_counter() - w0)
            cpu[mode].append(time.process_time() - c0)
    print(f"redaction off vs on (email, card, phone), {len(sealed)} inserts of {spans} spans each, medians:")
    for mode in ("off", "on"):
        w, c = statistics.median(wall[mode]), statistics.median(cpu[mode])
        print(f"  redaction {mode:3s}  {spans / w:>10,.0f} spans/s wall   {c / spans * 1e6:6.2f} µs CPU per span")
    ratio_wall = statistics.median(wall["on"]) / statistics.median(wall["off"])
    ratio_cpu = statistics.median(cpu["on"]) / statistics.median(cpu["off"])
    print(f"  on / off: wall time × {ratio_wall:.2f}, CPU time × {ratio_cpu:.2f}")
    for store in stores.values():
        store.close()


def bench_otlp(data_dir: str, bodies: int, repeats: int, redaction_mode: str = "on") -> None:
    traces_per_body = 100
    batches = []
    seq = 0
    for r in range(repeats):
        envelopes = []
        for b in range(bodies):
            body = encode_otlp_request(otlp_traces(traces_per_body, seed=r * 10_000 + b))
            envelopes.append((body, seq))
            seq += 1
        batches.append(envelopes)
    spans = traces_per_body * 5 * bodies
    print(f"otlp: {bodies} bodies × {traces_per_body * 5} spans = {spans} spans per insert, median of {repeats}")
    from ragmon.sinks.envelope import seal

    sealed = [[seal(body, "acme", s) for body, s in batch] for batch in batches]
    if redaction_mode == "compare":
        bench_redaction(data_dir, sealed, spans)
        return
    print(f"  PII redaction in the views: {redaction_mode}")
    results = {}
    store = open_store(data_dir, database="bench_otlp")
    _install_real_sql(store, redaction_mode)
    results["insert_otlp (chDB)"] = _median_rate(spans, repeats, lambda i: store.insert_otlp(sealed[i], f"b{i}"))
    stored = store.query(f"SELECT count() AS n FROM {store._ddl.table('spans')}")[0]["n"]
    content = store.query(f"SELECT count() AS n FROM {store._ddl.table('span_content')}")[0]["n"]
    t0 = time.perf_counter()
    fragments = store.trace_fragments(0, bodies - 1)
    fragments_ms = (time.perf_counter() - t0) * 1000
    store.close()
    with ClickHouseHttpServer(data_dir) as server:
        remote = open_store(server.url, database="bench_otlp_http")
        _install_real_sql(remote, redaction_mode)
        results["insert_otlp (clickhouse-connect → loopback HTTP)"] = _median_rate(
            spans, repeats, lambda i: remote.insert_otlp(sealed[i], f"h{i}")
        )
        remote.close()
    for name, rate in results.items():
        print(f"  {name:58s} {rate:>12,.0f} spans/s")
    print(
        f"  stored {stored:,} spans, {content:,} content rows; trace_fragments over one batch"
        f" ({len(fragments)} traces) {fragments_ms:.0f} ms"
    )


FILL_SQL = """
INSERT INTO {spans} (tenant, trace_id, span_id, parent_span_id, name, stage, feature, service, release, environment,
    start_time, duration_ms, status, model, input_tokens, output_tokens, cost_usd, ttft_ms, ingest_seq)
SELECT
    ['acme', 'globex'][number % 2 + 1],
    lower(hex(cityHash64(number DIV 5))) || lower(hex(number DIV 5)),
    lower(hex(cityHash64(number))),
    '',
    'span',
    ['request', 'embed', 'search', 'rerank', 'generate'][number % 5 + 1],
    ['support', 'search', 'billing'][(number DIV 5) % 3 + 1],
    'rag-api',
    -- two releases, the second over the day's last third; a tenth of the traces in staging
    if(number * 3 < {total} * 2, '4.1.0', '4.2.0'),
    if((number DIV 5) % 10 = 0, 'staging', 'prod'),
    now64(9) - toIntervalMillisecond(86400000 - intDiv(number * 86400000, {total})),
    exp(4 + (number % 5) * 0.6 + randNormal(0, 0.5)),
    if(rand() % 50 = 0, 'error', 'ok'),
    ['', 'text-embedding-3-small', '', 'rerank-v3', 'gpt-4o-mini'][number % 5 + 1],
    if(number % 5 = 4, 500 + rand() % 2000, 0),
    if(number % 5 = 4, 20 + rand() % 500, 0),
    if(number % 5 = 4, 0.0005, NULL),
    if(number % 5 = 4, toFloat32(exp(4 + randNormal(0, 0.4))), NULL),
    {seq}
FROM numbers({start}, {count})
SETTINGS optimize_on_insert = 0
"""


def bench_report(data_dir: str, fill_rows: int, repeats: int) -> None:
    store: Store = open_store(data_dir, database="bench_report")
    spans = store._ddl.table("spans")
    started = time.perf_counter()
    step = 2_000_000
    for start in range(0, fill_rows, step):
        # In time order, as traffic arrives: each chunk covers its own slice of the 24 hours.
        count = min(step, fill_rows - start)
        seq = start // step + 1
        store.backend.execute(FILL_SQL.format(spans=spans, start=start, count=count, total=fill_rows, seq=seq))
        store.roll_up(seq, seq)  # as the agent does once the sampler has decided the chunk's traces
    fill_s = time.perf_counter() - started
    stored = store.query(f"SELECT count() AS n FROM {spans}")[0]["n"]
    rollup = store.query(f"SELECT count() AS n FROM {store._ddl.table('spans_1m')}")[0]["n"]
    hours = store.query(f"SELECT count() AS n FROM {store._ddl.table('spans_1h')}")[0]["n"]
    print(
        f"report: {stored:,} spans stored and rolled up in {fill_s:.1f} s (engine-side fill),"
        f" {rollup:,} minute rows, {hours:,} hour rows"
    )
    for state in ("as filled", "after OPTIMIZE FINAL (what background merges converge to)"):
        if state != "as filled":
            for table in ("spans_1m", "spans_1h"):
                store.backend.execute(f"OPTIMIZE TABLE {store._ddl.table(table)} FINAL")
        counts = [
            store.query(f"SELECT count() AS n FROM {store._ddl.table(t)}")[0]["n"] for t in ("spans_1m", "spans_1h")
        ]
        print(f"  {state}: {counts[0]:,} minute rows, {counts[1]:,} hour rows")
        baseline_ms = 0.0
        for label, read, kwargs in (
            ("report(24 h), all tenants", store.report, {}),
            ("report(24 h, tenant=acme)", store.report, {"tenant": "acme"}),
            ("report(7 d), all tenants", store.report, {}),
            ("report(1 h, feature=support)", store.report, {"feature": "support"}),
            ("report(24 h, release=4.2.0)", store.report, {"release": "4.2.0"}),
            ("report(24 h, release=4.2.0, env=prod)", store.report, {"release": "4.2.0", "environment": "prod"}),
            ("releases(24 h), all tenants", store.releases, {}),
            ("releases(7 d), all tenants", store.releases, {}),
            ("releases(24 h, tenant=acme)", store.releases, {"tenant": "acme"}),
        ):
            since_s = 3_600 if "1 h" in label else (7 * 86_400 if "7 d" in label else 86_400)
            times = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                rows = read(since_s, **kwargs)
                times.append(time.perf_counter() - t0)
            median_ms = statistics.median(times) * 1000
            baseline_ms = baseline_ms or median_ms  # the first line: the 24-hour report, measured in this run
            print(
                f"    {label:38s} median {median_ms:7.1f} ms  x{median_ms / baseline_ms:.2f} of report(24 h)"
                f"   ({len(rows)} rows)"
            )
    t0 = time.perf_counter()
    store.query(f"SELECT feature, stage, quantile(0.95)(duration_ms) FROM {spans} GROUP BY feature, stage")
    print(f"  {'(for scale) raw-span p95 GROUP BY':40s}        {(time.perf_counter() - t0) * 1000:7.1f} ms")
    store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=10_000, help="requests per batch (5 spans each)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--fill-rows", type=int, default=10_000_000)
    parser.add_argument("--otlp-bodies", type=int, default=100, help="request bodies (500 spans each) per insert")
    parser.add_argument("--only", default="otlp,insert,report", help="comma-separated parts to run")
    parser.add_argument(
        "--redaction", choices=("on", "off", "compare"), default="on", help="PII redaction in the OTLP views"
    )
    args = parser.parse_args()
    parts = set(args.only.split(","))
    print(f"load average before: {os.getloadavg()}")
    with tempfile.TemporaryDirectory(prefix="ragmon-bench-") as data_dir:
        if "otlp" in parts:
            bench_otlp(data_dir, args.otlp_bodies, args.repeats, args.redaction)
        if "insert" in parts:
            bench_inserts(data_dir, args.requests, args.repeats)
        if args.fill_rows and "report" in parts:
            bench_report(data_dir, args.fill_rows, args.repeats)
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
