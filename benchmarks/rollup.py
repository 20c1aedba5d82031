"""The agent's minute roll-up (`sinks/rollup_sql.py`) against the plain aggregation the v1–v4 view ran per insert.

    .venv/bin/python benchmarks/rollup.py [--traces 40000] [--widths 1,8,40] [--repeats 3]

Fills `spans` with `tests.support.synth.make_batch` traces (root + 4 stages, 5 spans each; with `--nested` a same-stage
child under every search and generate span, as LlamaIndex under OpenInference sends), one ingest sequence number
per 1,000 traces, then rolls the whole store up in ranges of `--widths` sequence numbers, side by side with the
view's query (`count()`, sums and quantile states grouped per minute and, as the table is keyed since v7, eval run;
no walk) over the same ranges, alternating
which goes first. Prints the process CPU per span (chDB runs in it: robust to other jobs on a shared machine),
median of `--repeats`, and the ratio. Each run rolls into emptied rollup tables.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `tests.support` when run as a script

from ragmon.sinks import open_store
from ragmon.sinks.rollup_sql import rollup_sql
from ragmon.sinks.schema import DURATION_STATE, TTFT_STATE

from tests.support.span_rows import insert_spans
from tests.support.synth import make_batch

TRACES_PER_SEQ = 1_000

VIEW_SQL = f"""
INSERT INTO spans_1m SELECT s.tenant AS tenant, s.feature AS feature, s.stage AS stage, s.model AS model,
    s.eval_run AS eval_run, toStartOfMinute(toDateTime(s.start_time)) AS minute, count() AS spans,
    countIf(s.status = 'error') AS errors,
    {DURATION_STATE.replace("(", "State(", 1)}(s.duration_ms) AS duration_q,
    {TTFT_STATE.replace("(", "State(", 1)}(s.ttft_ms) AS ttft_q,
    sum(s.input_tokens) AS input_tokens, sum(s.output_tokens) AS output_tokens,
    sum(s.cached_input_tokens) AS cached_input_tokens,
    sum(ifNull(s.cost_usd, 0)) AS cost_usd, countIf(s.cost_usd IS NOT NULL) AS cost_known
FROM spans AS s WHERE ingest_seq BETWEEN {{seq_from:UInt64}} AND {{seq_to:UInt64}}
GROUP BY tenant, feature, stage, model, eval_run, minute"""

NEST_SQL = """
INSERT INTO spans SELECT * REPLACE (reverse(span_id) AS span_id, span_id AS parent_span_id,
    duration_ms * 0.9 AS duration_ms, start_time + toIntervalNanosecond(1000) AS start_time)
FROM spans WHERE stage IN ('generate', 'search')"""


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--traces", type=int, default=40_000)
    parser.add_argument("--widths", default="1,8,40", help="sequence numbers per range (1,000 traces each)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--nested", action="store_true", help="a same-stage child under each search and generate")
    args = parser.parse_args()
    store = open_store(tempfile.mkdtemp(prefix="ragmon-rollup-bench-"))
    seqs = args.traces // TRACES_PER_SEQ
    for seq in range(1, seqs + 1):
        insert_spans(store, make_batch(TRACES_PER_SEQ, seed=seq, ingest_seq=seq))
    if args.nested:
        store.backend.execute(NEST_SQL)
    spans = store.query("SELECT count() AS n FROM spans")[0]["n"]
    print(f"{spans:,} spans in {seqs} sequence numbers ({'nested' if args.nested else 'no nesting'})")

    def run(sql: str, width: int, token: str) -> float:
        store.backend.execute("TRUNCATE TABLE spans_1m")
        store.backend.execute("TRUNCATE TABLE spans_1h")
        began = _cpu_s()
        for start in range(1, seqs + 1, width):
            # ancestors among the next range too, as the agent sees them (it rolls up a range a second or two
            # after storing it, and stores on meanwhile)
            params = {"seq_from": start, "seq_to": min(seqs, start + width - 1), "context_to": start + 2 * width - 1}
            # a token per run: a range rolled up again with the same token would be dropped
            store.backend.execute(sql, params, {"insert_deduplication_token": f"{token}:{start}"})
        return (_cpu_s() - began) / spans * 1e6

    for width in (int(w) for w in args.widths.split(",")):
        results: dict[str, list[float]] = {"view's aggregation": [], "roll-up": []}
        queries = {"view's aggregation": VIEW_SQL, "roll-up": rollup_sql(store._ddl)}
        for repeat in range(args.repeats):
            order = list(queries) if repeat % 2 == 0 else list(reversed(queries))
            for name in order:
                results[name].append(run(queries[name], width, f"{name}:{width}:{repeat}"))
        view, rolled = (statistics.median(results[name]) for name in results)
        print(
            f"ranges of {spans * width // seqs:>7,} spans: view's aggregation {view:.2f} µs/span, "
            f"roll-up {rolled:.2f} µs/span (×{rolled / view:.1f})"
        )
    store.close()


if __name__ == "__main__":
    main()
