"""The document views over a large embedded store: `Store.documents`, `problem_documents`, `document_shift`.

    .venv/bin/python benchmarks/documents.py [--spans 10000000] [--repeats 5] [--store DIR]

Fills a fresh embedded store (chDB, a temporary directory) inside the engine (`INSERT … SELECT FROM numbers()`, so
building 10M rows takes seconds, not Python's minutes): traces of five spans (request, embed, search with 10
documents, rerank with 5, generate) over the last 23 hours, two features, two releases (A the first 16 hours, B
after), chunk ids from 20,000 chunks, ten of each of 2,000 paragraphs (the sources); one `trace_questions` row per
trace in 200 question groups, and a faithfulness score for one trace in 20 (inclusion probability 0.05). Then rolls
each range of 20,000 traces' spans up as the agent does (the span rollup, then the document rollup), printing what
the documents add to the agent's roll-up step. Then runs each view over the last 24 hours (one feature and all; the
compare helper's call: one feature, two releases, one group and all groups) as a caller's read, `--repeats` times,
and prints the median and the slowest wall time of each.
The issue's bar: each view ≤ 200 ms on the embedded store over 10M spans. `--store DIR` keeps the filled store in
DIR and reuses it when DIR holds one (its `now` saved beside it), so the 10M-span store is built once.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ragmon.sinks import open_store
from ragmon.sinks.documents_rollup_sql import documents_rollup_sql
from ragmon.sinks.inserts import INSERT_SETTINGS
from ragmon.sinks.rollup_sql import rollup_sql
from ragmon.sinks.schema import QUESTION_GROUPS_TABLE, TRACE_QUESTIONS_TABLE, Ddl

SPANS_PER_TRACE = 5
TRACES_PER_RANGE = 20_000  # the spans of this many traces make one roll-up range (ingest_seq)
GROUPS = 200
PARAGRAPHS = 2_000
CHUNKS = 20_000


def fill(store: Any, traces: int, now_s: int) -> None:
    db = store.topology.database
    spans = f"{db}.spans"
    window_s = 23 * 3600
    # per trace n: feature, release (B for the last 7 hours), group (skewed: low ids far more often), start
    trace = (
        f"SELECT number AS n, lower(hex(toFixedString(reinterpretAsString(toUInt128(number + 1)), 16))) AS trace_id,"
        f" if(n % 3 = 0, 'billing', 'support') AS feature,"
        f" toInt64({now_s - window_s}) + toInt64(n * {window_s} / {traces}) AS start_s,"
        f" if(start_s > {now_s - 7 * 3600}, 'v2', 'v1') AS release,"
        f" concat('g', toString(toUInt32(pow((cityHash64(n) % 10000) / 10000, 3) * {GROUPS}))) AS group_id"
        f" FROM numbers({traces})"
    )
    # a group retrieves from its own corner of the corpus; release B swaps one paragraph for the busiest groups
    paragraph = f"toUInt32((cityHash64(group_id) % {PARAGRAPHS}) + i + if(release = 'v2' AND i = 1, 7, 0))"
    # each paragraph is cut into CHUNKS / PARAGRAPHS chunks, any of which a search may find
    chunk = f"(({paragraph} % {PARAGRAPHS}) * {CHUNKS // PARAGRAPHS} + cityHash64(n, i) % {CHUNKS // PARAGRAPHS})"
    docs = (
        "arrayMap(i -> concat('c', toString({chunk})), range(1, {k} + 1)) AS ids,"
        " arrayMap(i -> 1 - i / 20, range(1, {k} + 1)) AS scores,"
        f" arrayMap(i -> concat('p', toString({paragraph} % {PARAGRAPHS})), range(1, {{k}} + 1)) AS sources"
    )
    columns = (
        "tenant, trace_id, span_id, parent_span_id, name, stage, feature, eval_run, user, session, service, release,"
        " environment, start_time, duration_ms, status, error_type, model, provider, input_tokens, output_tokens,"
        " cached_input_tokens, cost_usd, top1_score, similarity_gap, norm_deviation, ttft_ms, retrieved_ids,"
        " retrieved_scores, retrieved_sources, attributes, ingest_seq"
    )
    for s, stage in enumerate(("request", "embed", "search", "rerank", "generate")):
        k = {"search": 10, "rerank": 5}.get(stage, 0)
        chosen = docs.format(k=k, chunk=chunk) if k else "[] AS ids, [] AS scores, [] AS sources"
        store.backend.execute(
            f"INSERT INTO {spans} ({columns}) SELECT 'acme', trace_id, concat(substring(trace_id, 1, 15), '{s}'),"
            f" if({s} = 0, '', concat(substring(trace_id, 1, 15), '0')), '{stage}', '{stage}', feature, '', '', '',"
            " 'bot', release, 'prod', toDateTime64(start_s, 9) + toIntervalMillisecond(" + str(s) + "), 50.0,"
            " 'ok', '', '', '', 0, 0, 0, NULL, NULL, NULL, NULL, NULL, ids, scores, sources, map(),"
            f" 1 + intDiv(n, {TRACES_PER_RANGE})"
            f" FROM (SELECT *, {chosen} FROM ({trace}))",
            settings={"max_insert_threads": 2},
        )
    store.backend.execute(
        f"INSERT INTO {db}.{TRACE_QUESTIONS_TABLE} SELECT 'acme', trace_id, feature, '', release, 'prod',"
        " toDateTime64(start_s, 9), group_id, concat('question of ', group_id), 1.0, 0, 50.0"
        f" FROM ({trace})"
    )
    store.backend.execute(
        f"INSERT INTO {db}.{QUESTION_GROUPS_TABLE} (tenant, feature, group_id, label, normalised, grouper, centroid,"
        " members, created_at, updated_at) SELECT 'acme', f, concat('g', toString(number)),"
        " concat('question of g', toString(number)), '', 'lexical', [], 1, now64(3), now64(3)"
        f" FROM numbers({GROUPS}) ARRAY JOIN ['support', 'billing'] AS f"
    )
    store.backend.execute(
        f"INSERT INTO {db}.scores (tenant, trace_id, feature, eval_run, release, metric, judge_version, value,"
        " status, run_name, scored_at, inclusion_probability) SELECT 'acme', trace_id, feature, '', release,"
        " 'faithfulness', 'v1', (cityHash64(n, 'y') % 100) / 100, 'ok', '', toDateTime64(start_s + 60, 3), 0.05"
        f" FROM ({trace}) WHERE n % 20 = 0"
    )
    store.backend.execute(f"OPTIMIZE TABLE {db}.scores FINAL")


def roll_up(store: Any, traces: int) -> tuple[float, float, int]:
    """Each range rolled up as the agent does (`Store.roll_up`: the span rollup, then the documents); returns the
    seconds the span rollup's INSERTs and the document rollup's took in all, and the number of ranges."""
    ddl = Ddl(store.topology)
    settings = {**INSERT_SETTINGS, "distributed_product_mode": "local"}
    spans_s = documents_s = 0.0
    ranges = -(-traces // TRACES_PER_RANGE)
    for seq in range(1, ranges + 1):
        params = {"seq_from": seq, "seq_to": seq}
        started = time.perf_counter()
        store.backend.execute(rollup_sql(ddl), {**params, "context_to": seq}, settings)
        spans_s += time.perf_counter() - started
        started = time.perf_counter()
        store.backend.execute(documents_rollup_sql(ddl), params, settings)
        documents_s += time.perf_counter() - started
    return spans_s, documents_s, ranges


def timed(run: Callable[[], Any], repeats: int) -> tuple[float, float, Any]:
    run()  # warm: the first read loads marks and the query cache of the engine's parts
    times, answer = [], None
    for _ in range(repeats):
        started = time.perf_counter()
        answer = run()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times), max(times), answer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spans", type=int, default=10_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--store", help="keep the filled store here, and reuse it when it is there")
    args = parser.parse_args()
    traces = args.spans // SPANS_PER_TRACE
    with tempfile.TemporaryDirectory(prefix="ragmon-documents-") as tmp:
        where = Path(args.store) if args.store else Path(tmp)
        made = where / "filled.json"
        store = open_store(str(where / "engine"), database="bench")
        started = time.perf_counter()
        if made.exists():
            now_s = int(json.loads(made.read_text())["now_s"])
        else:
            now_s = int(time.time()) // 60 * 60
            fill(store, traces, now_s)
            print(f"filled {args.spans:,} spans in {time.perf_counter() - started:.1f} s")
            spans_s, documents_s, ranges = roll_up(store, traces)
            print(
                f"rolled up {ranges} ranges of {TRACES_PER_RANGE:,} traces: span rollup {spans_s:.1f} s, document"
                f" rollup {documents_s:.1f} s ({documents_s / ranges * 1000:.0f} ms a range;"
                f" x{documents_s / spans_s:.2f} the span rollup's time)"
            )
            made.write_text(json.dumps({"now_s": now_s, "spans": args.spans}))
        db = store.topology.database
        n = store.query(f"SELECT count() AS n FROM {db}.spans")[0]["n"]
        print(f"the store holds {n:,} spans")
        day = 86400.0
        views: dict[str, Callable[[], Any]] = {
            "documents (support, top 50)": lambda: store.documents(day, feature="support", tenant="acme", now_s=now_s),
            "documents (all features)": lambda: store.documents(day, tenant="acme", now_s=now_s),
            "problem_documents (support)": lambda: store.problem_documents(
                day, feature="support", tenant="acme", now_s=now_s
            ),
            "document_shift (support, v1→v2, all groups)": lambda: store.document_shift(
                "support", "v1", "v2", day, tenant="acme", now_s=now_s
            ),
            "document_shift (support, v1→v2, group g0)": lambda: store.document_shift(
                "support", "v1", "v2", day, group_id="g0", tenant="acme", now_s=now_s
            ),
        }
        print(f"{'view':48} {'median ms':>10} {'max ms':>8}  rows")
        for name, run in views.items():
            median, worst, answer = timed(run, args.repeats)
            print(f"{name:48} {median:10.1f} {worst:8.1f}  {len(answer)}")
        store.close()


if __name__ == "__main__":
    main()
