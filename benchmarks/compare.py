"""A release comparison (`Store.compare`, what `ragmon compare` and the canary analysis read) over a big store.

    .venv/bin/python benchmarks/compare.py [--spans 10000000] [--repeats 5]

Fills the embedded store in SQL (fast, no Python per row): `--spans` spans over one day, five per trace (the request,
embed, search with four retrieved documents and their paragraph ids, rerank, generate), four features; each feature
ran release A for 20 hours and release B for the last 4; every trace has its `trace_questions` row (one of 50
question groups per feature), 5 % of traces a payload and a judged score. Then times `Store.compare` for one feature
with the default releases (sequential: B's 4 hours against A's 4 hours before it) and, beside it, `Store.report` over
the same day (the issue's reference read), alternating which goes first; prints the medians of `--repeats` and the
ratio.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ragmon.sinks import open_store
from ragmon.sinks.schema import TRACE_QUESTIONS_TABLE

DAY_S = 86400
T0 = 1_800_000_000 - DAY_S


def fill(store, spans: int) -> None:
    traces = spans // 5
    t = store._ddl.table
    # a trace: number n; its feature n % 4, its start T0 + n * DAY / traces, release B in the last 4 hours
    trace = (
        f"SELECT number AS n, concat('f', toString(n % 4)) AS feature, lower(hex(cityHash64(n, 'trace'))) AS tid,"
        f" toDateTime64({T0} + n * {DAY_S} / {traces}, 9) AS start,"
        f" if(n * {DAY_S} / {traces} >= 20 * 3600, 'B', 'A') AS release, (n * 7919) % 50 AS grp,"
        f" cityHash64(n) % 1000 AS r FROM numbers({traces})"
    )
    store.backend.execute(
        f"INSERT INTO {t('spans')} (tenant, trace_id, span_id, parent_span_id, name, stage, feature, service, release,"
        " environment, start_time, duration_ms, status, model, input_tokens, output_tokens, cost_usd, top1_score,"
        " similarity_gap, retrieved_ids, retrieved_scores, retrieved_sources)\n"
        "SELECT 't', tid, lower(hex(cityHash64(n, k))), if(k = 0, '', lower(hex(cityHash64(n, 0)))),"
        " stage, stage, feature, 'bot', release, 'prod', start + k / 1000, "
        " 50 + (r % 400) * (k + 1) + if(release = 'B', 20, 0), if(r < 10, 'error', 'ok'), if(k = 4, 'm', ''),"
        " if(k = 4, 300 + r % 100, 0), if(k = 4, 50 + r % 30, 0), if(k = 4, 0.001 + r / 1e6, NULL),"
        " if(k = 2, 0.5 + r / 2000, NULL), if(k = 2, r / 10000, NULL),"
        " if(k = 2, arrayMap(i -> concat(release, '-c', toString((grp * 3 + i) % 200)), range(4)), []),"
        " if(k = 2, [0.9, 0.8, 0.7, 0.6], []),"
        " if(k = 2, arrayMap(i -> concat('para-', toString((grp * 3 + i + if(release = 'B' AND grp = 0, 1, 0)) % 150)),"
        " range(4)), [])\n"
        f"FROM ({trace}) ARRAY JOIN range(5) AS k, ['request', 'embed', 'search', 'rerank', 'generate'] AS stage",
        settings={"max_insert_threads": 2},
    )
    store.backend.execute(
        f"INSERT INTO {t(TRACE_QUESTIONS_TABLE)} SELECT 't', tid, feature, '', release, 'prod', start,"
        " concat(feature, '-g', toString(grp)), concat('question ', toString(grp)), 1.0, r < 10, 50 + r % 400"
        f" FROM ({trace})"
    )
    store.backend.execute(
        f"INSERT INTO {t('payloads')} (tenant, trace_id, feature, release, environment, start_time,"
        " sampling_reason, inclusion_probability)"
        f" SELECT 't', tid, feature, release, 'prod', start, 'baseline', 0.05 FROM ({trace}) WHERE r < 50"
    )
    store.backend.execute(
        f"INSERT INTO {t('scores')} (tenant, trace_id, feature, metric, judge_version, value, status, scored_at,"
        " inclusion_probability, flags)"
        f" SELECT 't', tid, feature, 'faithfulness', 'local', (r % 10) / 10, 'ok', now64(3), 0.05,"
        f" if(grp = 0 AND release = 'B', ['refusal'], []) FROM ({trace}) WHERE r < 50"
    )


def timed(call) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--spans", type=int, default=10_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        store = open_store(directory, database="bench_compare")
        started = time.perf_counter()
        fill(store, args.spans)
        print(f"filled {args.spans} spans in {time.perf_counter() - started:.1f} s", flush=True)
        document = store.compare("f0")
        print(
            f"compared {document['candidate']['release']} with {document['baseline']['release']}"
            f" ({document['mode']}); first group: {document['groups'][0]['question']!r},"
            f" stopped retrieving {document['groups'][0]['stopped_retrieving']}",
            flush=True,
        )
        compare_s, report_s = [], []
        for i in range(args.repeats):
            pair = [("compare", lambda: store.compare("f0")), ("report", lambda: store.report(DAY_S, now_s=T0 + DAY_S))]
            for name, call in pair if i % 2 == 0 else reversed(pair):
                (compare_s if name == "compare" else report_s).append(timed(call))
        c, r = statistics.median(compare_s), statistics.median(report_s)
        print(
            f"compare: {c * 1000:.0f} ms (median of {args.repeats}); report over the day: {r * 1000:.0f} ms;"
            f" ratio {c / r:.2f}"
        )
        store.close()


if __name__ == "__main__":
    main()
