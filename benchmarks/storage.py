"""Bytes on disk per stored span and per kept trace, on the embedded engine (chDB), for capacity planning.

Stores demo-like traffic through the agent's own ingest path (OTLP envelopes → `otlp_in` → the normalising views →
`spans`, `span_content`, rollups): `tests.support.synth.otlp_traces` requests (root + embed, search, rerank, generate),
with their captured text replaced by the demo app's: a question from `ragmon/demo/questions.json`, five passages of
the demo corpus on the search span, an answer built from the passages' sentences. Then the sampler's copy keeps
`--keep-rate` of the traces in `payloads`. Sizes come from `system.parts` (active parts, compressed bytes on disk
over rows), once as inserted and once after `OPTIMIZE … FINAL` (what background merges converge to), and the
biggest columns of `spans` from `system.parts_columns`. Each run stores fresh traces (another seed) in its own database;
the summary gives the median of the runs.

It also reports the engine's CPU time per span of each INSERT (median over the run's INSERTs).

    /work/venv/bin/python benchmarks/storage.py                       # 3 runs × 200,000 traces (1M spans)
    /work/venv/bin/python benchmarks/storage.py --traces 20000 --runs 1
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ragmon.sinks import (  # noqa: E402
    envelope,
    open_store,
    otlp_views,
)
from ragmon.sinks.store import Store  # noqa: E402

from ragmon.demo.passages import load_corpus, load_questions  # noqa: E402
from tests.support.synth import encode_otlp_request, otlp_traces  # noqa: E402

TRACES_PER_INSERT = 10_000  # 50,000 spans per INSERT, the size the agent's writer batches to under load
TABLES = ("spans", "span_content", "spans_1m", "spans_1h", "payloads")


def demo_text(spans: list[dict[str, Any]], rng: random.Random) -> None:
    """Replace synth's placeholder text with the demo app's questions, passages and answers (in place)."""
    import json

    passages = load_corpus()
    questions = load_questions()
    for span in spans:
        attributes = span["attributes"]
        if "ragmon.question" in attributes:
            attributes["ragmon.question"] = rng.choice(questions).question
        if "ragmon.retrieval.document_texts" in attributes:
            chosen = rng.sample(passages, 5)
            attributes["ragmon.retrieval.document_ids"] = [p.id for p in chosen]
            attributes["ragmon.retrieval.document_texts"] = json.dumps([p.text for p in chosen])
            sentences = [s.strip() + "." for p in chosen[:2] for s in p.text.split(".") if s.strip()]
            answer = " ".join(sentences[: rng.randint(1, 4)])
        if "gen_ai.output.messages" in attributes:
            attributes["gen_ai.output.messages"] = json.dumps(
                [{"role": "assistant", "parts": [{"type": "text", "content": answer}]}]
            )


def store_traffic(store: Store, traces: int, seed: int) -> tuple[int, list[float]]:
    """Insert `traces` demo-like traces through the OTLP path; returns the spans stored and, per INSERT, the CPU
    time per span in µs (the process's CPU time: chDB's threads run in it, so this is the engine's parsing,
    normalising views, table writes and the agent's roll-up of the range — robust to other jobs on a shared
    machine, unlike wall time)."""
    rng = random.Random(seed)
    seq = 0
    cpu_us_per_span: list[float] = []
    for start in range(0, traces, TRACES_PER_INSERT):
        count = min(TRACES_PER_INSERT, traces - start)
        spans = otlp_traces(count, seed=seed * 1_000_003 + start, spread_s=3000)
        demo_text(spans, rng)
        # 100 traces (500 spans) per OTLP request, as an SDK's exporter batches them.
        envelopes = []
        for offset in range(0, len(spans), 500):
            envelopes.append(envelope.seal(encode_otlp_request(spans[offset : offset + 500]), "acme", seq))
            seq += 1
        cpu_before = time.process_time()
        store.insert_otlp(envelopes, f"storage-{seed}-{start}")
        store.roll_up(seq - len(envelopes), seq - 1)  # what the agent does once the sampler has decided them
        cpu_us_per_span.append((time.process_time() - cpu_before) / len(spans) * 1e6)
    return int(store.query("SELECT count() AS n FROM spans")[0]["n"]), cpu_us_per_span


def keep(store: Store, rate: float, seed: int) -> int:
    """Copy `rate` of the traces into `payloads`, as the sampler does for its kept traces."""
    rng = random.Random(seed)
    trace_ids = [r["trace_id"] for r in store.query("SELECT DISTINCT trace_id FROM spans", max_rows=10_000_000)]
    kept = [t for t in trace_ids if rng.random() < rate]
    for start in range(0, len(kept), 2_000):
        rows = [{"tenant": "acme", "trace_id": t, "reasons": ["baseline"], "probability": rate} for t in kept]
        store.copy_payloads(rows[start : start + 2_000])
    return len(kept)


def part_sizes(store: Store) -> dict[str, dict[str, int]]:
    rows = store.query(
        "SELECT table, sum(rows) AS rows, sum(data_compressed_bytes) AS compressed,"
        " sum(data_uncompressed_bytes) AS uncompressed, count() AS parts"
        " FROM system.parts WHERE database = {db:String} AND active GROUP BY table",
        {"db": store.topology.database},
    )
    return {r["table"]: {k: int(r[k]) for k in ("rows", "compressed", "uncompressed", "parts")} for r in rows}


def top_columns(store: Store, limit: int = 6) -> list[dict[str, Any]]:
    # Per-column sizes exist only for wide parts (a part above min_bytes_for_wide_part); compact parts report 0.
    return store.query(
        "SELECT column AS name, sum(column_data_compressed_bytes) AS compressed"
        " FROM system.parts_columns WHERE database = {db:String} AND table = 'spans' AND active"
        " GROUP BY column HAVING compressed > 0 ORDER BY compressed DESC LIMIT {n:UInt32}",
        {"db": store.topology.database, "n": limit},
    )


def one_run(data_dir: Path, run: int, traces: int, keep_rate: float) -> dict[str, float]:
    store = open_store(data_dir, database=f"storage_{run}_{int(time.time())}")
    try:
        otlp_views.install(store)
        started = time.perf_counter()
        spans, cpu_us = store_traffic(store, traces, seed=run + 1)
        kept = keep(store, keep_rate, seed=run + 1)
        elapsed = time.perf_counter() - started
        inserted = part_sizes(store)
        for table in TABLES:
            store.backend.execute(f"OPTIMIZE TABLE {store._ddl.table(table)} FINAL")
        merged = part_sizes(store)
        print(f"run {run + 1}: {spans:,} spans in {traces:,} traces, {kept:,} kept; stored in {elapsed:.0f} s")
        print(
            f"  insert CPU per span over {len(cpu_us)} INSERTs: median {statistics.median(cpu_us):.1f} µs"
            f" (min {min(cpu_us):.1f}, max {max(cpu_us):.1f})"
        )
        for table in TABLES:
            before, after = inserted.get(table), merged.get(table)
            if before and after:
                print(
                    f"  {table:13s} rows {after['rows']:>9,}  compressed {before['compressed'] / 1e6:8.1f} MB as "
                    f"inserted ({before['parts']} parts), {after['compressed'] / 1e6:8.1f} MB merged; "
                    f"uncompressed {after['uncompressed'] / 1e6:8.1f} MB"
                )
        print(
            "  spans' biggest columns (merged): "
            + ", ".join(f"{c['name']} {c['compressed'] / spans:.1f} B" for c in top_columns(store))
        )
        content_traces = traces  # span_content holds every trace's text until the sampler's window passes
        return {
            "insert_cpu_us_per_span": statistics.median(cpu_us),
            "span_bytes_inserted": inserted["spans"]["compressed"] / spans,
            "span_bytes_merged": merged["spans"]["compressed"] / spans,
            "span_uncompressed": merged["spans"]["uncompressed"] / spans,
            "rollup_bytes_per_span": (merged["spans_1m"]["compressed"] + merged["spans_1h"]["compressed"]) / spans,
            "content_bytes_per_trace": merged["span_content"]["compressed"] / content_traces,
            "payload_bytes_per_kept_trace": merged["payloads"]["compressed"] / kept,
            "payload_uncompressed_per_kept_trace": merged["payloads"]["uncompressed"] / kept,
        }
    finally:
        store.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--traces", type=int, default=200_000, help="traces per run (5 spans each)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--keep-rate", type=float, default=0.05, help="share of traces copied to payloads")
    parser.add_argument("--data-dir", type=Path, help="engine directory (default: a temporary one)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="ragmon-storage-") as tmp:
        data_dir = args.data_dir or Path(tmp)
        results = [one_run(data_dir, run, args.traces, args.keep_rate) for run in range(args.runs)]
    print(f"\nmedian of {args.runs} run(s), {args.traces:,} traces ({args.traces * 5:,} spans) each:")
    for key in results[0]:
        values = [r[key] for r in results]
        unit = "µs CPU" if key.endswith("_us_per_span") else "bytes"
        print(f"  {key:38s} {statistics.median(values):10.1f} {unit}  (runs: {', '.join(f'{v:.1f}' for v in values)})")


if __name__ == "__main__":
    main()
