"""End-to-end ingest: sender processes post pre-encoded OTLP requests to `ragmon serve` (embedded store).

Reports spans/s from the first request sent until every span is queryable, how much later the report's rollup
counts them all (the agent rolls a range up once the sampler has decided its traces), the agent's peak RSS, and the
time of `ragmon report` (through the running agent) over what was stored. Run on demand:

    python benchmarks/ingest.py                      # 1,000,000 spans, 2 senders, 512 spans per request
    python benchmarks/ingest.py --spans 200000 --senders 1
    python benchmarks/ingest.py --store server       # the store in its own process, over ClickHouse HTTP
    python benchmarks/ingest.py --against HEAD~3     # this tree and a git worktree of HEAD~3, alternated
    python benchmarks/ingest.py --against minimal-sink   # ragmon and the issue's yardstick, alternated
    python benchmarks/ingest.py --memory-limits 768MiB,1GiB,1.5GiB   # agent.memory_limit: peak RSS and throughput

`--against REV` runs the benchmark `--rounds` times (3) on this tree and on a worktree of REV checked out in a
temporary directory, alternating (which goes first changes every round), each run a process of this script (copied
into the worktree, so both trees are driven the same way) serving its own tree's code with the same options; it
prints every run's figures, then the medians and their ratios.
This machine's speed drifts by tens of percent within minutes: only runs alternated like this compare.

`--sink minimal` sends the same requests to `benchmarks/_minimal_sink.py` instead of ragmon: the minimal Python
sink into chDB the ingest issue measures ragmon against (three attributes per span, JSON rows, nothing else);
`--against minimal-sink` alternates it with ragmon in one sitting, like `--against REV`.

`--memory-limits A,B,...` runs the agent with `agent.memory_limit` at each size and with none (the fixed sizes of
before, no engine cap, no pushback), alternated over `--rounds` rounds like `--against`, and prints a table: the
median peak RSS of the agent process (its embedded engine included, VmHWM: the whole run), its share of the limit,
the median spans/s end to end at saturation (the senders post as fast as they are answered) and its ratio to the
no-limit runs', and the requests the memory guard refused (429, retried after Retry-After by the senders).
`--memory-limit SIZE` is one such run.

`--store server` runs the engine in a separate process behind a ClickHouse HTTP endpoint (tests/support/chhttp.py, the
only modern ClickHouse installable here) and points the agent at it with `--clickhouse-url`, as a deployment with a
ClickHouse server does: the agent's own RSS and CPU are then Python's alone, and the engine's are reported apart.

Requests carry realistic RAG attributes (ragmon's SDK names: feature, model, tokens, documents with scores) and
distinct trace/span ids, built before the clock starts; each sender keeps one connection alive, as OTLP exporters
do, and retries 429/503 after Retry-After, as OTLP clients must, so back-pressure slows them instead of losing
spans. (Until 2026-12-02 the senders opened a connection per request: figures from before then are not comparable
with later ones; `--against` runs this script on both trees, so its pairs are.)
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing as mp
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import _source_tree  # noqa: E402 - beside this script

from tests.agent.harness import AgentProcess, EngineServer  # noqa: E402 - the repo's own test harness


def _template(spans_per_request: int) -> bytes:
    """One realistic request: traces of root + embed, search, rerank, generate, encoded by the OTel SDK path."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    import ragmon
    from ragmon.otlp_encoding import encode_spans

    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "ingest-bench"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    ragmon.configure(tracer_provider=provider, span_exporter=InMemorySpanExporter())
    rng = random.Random(1)
    features = ["docs-qa", "support-chat", "search-assist"]
    while len(exporter.get_finished_spans()) < spans_per_request:
        with ragmon.request(rng.choice(features), user=f"u{rng.randrange(500)}"):
            with ragmon.embed("text-embedding-3-small", provider="openai") as e:
                e.record(input_tokens=rng.randrange(5, 40))
            with ragmon.search(top_k=10, data_source="docs") as s:
                s.record(documents=[(f"doc-{rng.randrange(10**6)}", 0.9 - k * 0.03) for k in range(10)])
            with ragmon.rerank("rerank-v3.5", provider="cohere", top_k=4) as r:
                r.record(documents=[(f"doc-{rng.randrange(10**6)}", 0.98 - k * 0.1) for k in range(4)])
            with ragmon.generate("gpt-4o-mini", provider="openai") as g:
                g.record(input_tokens=rng.randrange(500, 1500), output_tokens=rng.randrange(50, 300))
        ragmon.force_flush()
    ragmon.shutdown()
    # Whole traces only (a trace's spans end children first, its root last): a trace cut at the request's end
    # would never be completed, and the agent waits for a trace's root before it counts the trace in the report.
    spans = exporter.get_finished_spans()[:spans_per_request]
    last_root = max(i for i, span in enumerate(spans) if span.parent is None)
    return encode_spans(spans[: last_root + 1])


def _span_count(template: bytes) -> int:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    request = ExportTraceServiceRequest.FromString(template)
    return sum(len(scope.spans) for resource in request.resource_spans for scope in resource.scope_spans)


def _requests(template: bytes, count: int, seed: int) -> list[bytes]:
    """`count` copies of the template with fresh trace and span ids (parents follow their spans)."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    rng = random.Random(seed)
    base = ExportTraceServiceRequest.FromString(template)
    out = []
    for _ in range(count):
        request = ExportTraceServiceRequest()
        request.CopyFrom(base)
        trace_ids: dict[bytes, bytes] = {}
        span_ids: dict[bytes, bytes] = {}
        for span in request.resource_spans[0].scope_spans[0].spans:
            span.trace_id = trace_ids.setdefault(span.trace_id, rng.randbytes(16))
            span.span_id = span_ids.setdefault(span.span_id, rng.randbytes(8))
        for span in request.resource_spans[0].scope_spans[0].spans:
            if span.parent_span_id:
                span.parent_span_id = span_ids.setdefault(span.parent_span_id, rng.randbytes(8))
        out.append(request.SerializeToString())
    return out


def _sender(url: str, template: bytes, count: int, seed: int, ready: mp.Barrier, result: mp.Queue) -> None:
    """Post `count` requests over one kept-alive connection, as OTLP exporters do (the Python one through a
    `requests` session); retry 429/503 after Retry-After, reconnect if the server closed the connection."""
    bodies = _requests(template, count, seed)
    parts = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    headers = {"Content-Type": "application/x-protobuf"}
    ready.wait()
    started, cpu_started = time.time(), time.process_time()
    throttled = failures = 0
    for body in bodies:
        while True:
            try:
                connection.request("POST", parts.path, body=body, headers=headers)
                response = connection.getresponse()
                response.read()
                failures = 0
            except (http.client.HTTPException, ConnectionError):
                connection.close()  # the next request opens a new connection
                failures += 1
                if failures > 20:
                    raise
                continue
            if response.status == 200:
                break
            if response.status not in (429, 503):
                raise RuntimeError(f"the receiver answered {response.status}")
            throttled += 1
            time.sleep(float(response.headers.get("Retry-After") or 0.5))
    connection.close()
    cpu_s = time.process_time() - cpu_started
    result.put({"started": started, "finished": time.time(), "throttled": throttled, "cpu_s": cpu_s})


class _Senders:
    """The sender processes: each builds its requests, then all start together; `first_sent` is the clock's start."""

    def __init__(self, url: str, template: bytes, per_sender: list[int]) -> None:
        ctx = mp.get_context("spawn")
        ready = ctx.Barrier(len(per_sender) + 1)
        self._results: mp.Queue = ctx.Queue()
        self._processes = [
            ctx.Process(target=_sender, args=(url, template, n, seed, ready, self._results))
            for seed, n in enumerate(per_sender)
        ]
        for process in self._processes:
            process.start()
        ready.wait()  # every sender has built its requests: the clock starts at the first send
        self.first_sent = time.time()

    def finish(self) -> list[dict[str, float]]:
        """Each sender's figures, once all have sent everything."""
        stats = [self._results.get(timeout=3600) for _ in self._processes]
        for process in self._processes:
            process.join()
        return stats


def _print_rates(total_spans: int, acknowledged_s: float, queryable_s: float, cpu_s: float) -> None:
    """The lines `_compare` reads (ragmon's and the minimal sink's runs print them alike)."""
    print(f"acknowledged in {acknowledged_s:.2f} s  →  {total_spans / acknowledged_s:,.0f} spans/s acknowledged")
    print(f"queryable after {queryable_s:.2f} s  →  {total_spans / queryable_s:,.0f} spans/s end to end")
    print(
        f"agent CPU until queryable: {cpu_s:.1f} s = {cpu_s / queryable_s:.2f} cores busy, "
        f"{cpu_s / total_spans * 1e6:.1f} µs per span"
    )


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of process `pid` so far (all its threads)."""
    return _stat_cpu_seconds(Path(f"/proc/{pid}/stat"))


def _stat_cpu_seconds(stat: Path) -> float:
    """User + system CPU seconds from a /proc `stat` file (a process's or one thread's)."""
    fields = stat.read_text().rsplit(")", 1)[1].split()  # past the command name, which may hold spaces
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _cpu_by_thread_name(pid: int) -> dict[str, float]:
    """{thread name: user + system CPU seconds} of the live threads of process `pid`. Python 3.11 leaves its threads
    named after the process ("python…"); the engine names its own (chDB's query pipeline and pools), so this splits
    the agent's CPU into Python's share and the engine's."""
    out: dict[str, float] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
            seconds = _stat_cpu_seconds(task / "stat")
        except OSError:
            continue  # the thread exited meanwhile
        out[name] = out.get(name, 0.0) + seconds
    return out


class _MemoryWatch:
    """Samples a process's anonymous and file-backed resident memory every 50 ms and keeps each one's peak. VmHWM
    counts both; the file-backed part is mostly the engine's shared library (chDB's is largely resident as
    soon as it is imported), clean pages the kernel can drop, while anonymous memory is what the agent's work uses."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak_mb = {"RssAnon": 0.0, "RssFile": 0.0}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            try:
                status = Path(f"/proc/{self.pid}/status").read_text()
            except OSError:
                return
            for line in status.splitlines():
                key = line.split(":", 1)[0]
                if key in self.peak_mb:
                    self.peak_mb[key] = max(self.peak_mb[key], int(line.split()[1]) / 1024)

    def stop(self) -> dict[str, float]:
        self._stop.set()
        self._thread.join()
        return self.peak_mb


def _peak_rss_mb(pid: int) -> float:
    return _status_mb(pid, "VmHWM")


def _status_mb(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


# How long after the last insert the idle RSS is read: the engine's allocator returns freed pages to the OS on its
# own within seconds (its decay time), so this reads what the agent keeps, not what a burst left behind.
_SETTLE_S = 15.0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spans", type=int, default=1_000_000)
    parser.add_argument("--senders", type=int, default=2)
    parser.add_argument("--spans-per-request", type=int, default=512)
    parser.add_argument("--report-repeats", type=int, default=5)
    parser.add_argument("--store", choices=["embedded", "server"], default="embedded")
    parser.add_argument("--sink", choices=["ragmon", "minimal"], default="ragmon", help="what receives the spans")
    parser.add_argument(
        "--against", metavar="REV", help="alternate with a worktree of this git revision, or with `minimal-sink`"
    )
    parser.add_argument("--rounds", type=int, default=3, help="runs per tree with --against or per limit")
    parser.add_argument("--memory-limit", metavar="SIZE", help="the agent's agent.memory_limit (default: none)")
    parser.add_argument(
        "--memory-limits", metavar="A,B,...", help="alternate runs at each memory limit and with none; a table"
    )
    parser.add_argument(
        "--settle-s", type=float, default=_SETTLE_S, help="wait before reading the idle RSS (0: do not read it)"
    )
    args = parser.parse_args(argv)
    if args.against:
        _compare(args)
        return
    if args.memory_limits:
        _compare_memory_limits(args)
        return
    requests_total = args.spans // args.spans_per_request
    per_sender = [requests_total // args.senders + (i < requests_total % args.senders) for i in range(args.senders)]
    template = _template(args.spans_per_request)
    total_spans = requests_total * _span_count(template)
    if args.sink == "minimal":
        _run_minimal_sink(template, per_sender, total_spans)
        return
    with tempfile.TemporaryDirectory(prefix="ragmon-ingest-") as tmp:
        engine = EngineServer(Path(tmp) / "clickhouse") if args.store == "server" else None
        store_args = ["--clickhouse-url", engine.url] if engine else ["--data-dir", str(Path(tmp) / "data")]
        extra_env = {"RAGMON_AGENT__CLICKHOUSE_URL": engine.url} if engine else {}
        # "none" unless asked: the fixed sizes, as before memory_limit (its default would be this machine's cgroup)
        extra_env["RAGMON_AGENT__MEMORY_LIMIT"] = args.memory_limit or "none"
        agent = AgentProcess(Path(tmp) / "data", grpc=False, extra_env=extra_env).start()
        try:
            senders = _Senders(f"{agent.otlp_http}/v1/traces", template, per_sender)
            first_sent = senders.first_sent
            assert agent.process is not None
            cpu_before = _cpu_seconds(agent.process.pid)
            engine_cpu_before = _cpu_seconds(engine.process.pid) if engine else 0.0
            threads_before = _cpu_by_thread_name(agent.process.pid)
            memory = _MemoryWatch(agent.process.pid)
            stats = senders.finish()
            acknowledged_s = max(s["finished"] for s in stats) - first_sent
            stored = _wait_for(agent, "SELECT count() AS n FROM spans", total_spans, timeout_s=600)
            queryable_s = time.time() - first_sent
            agent_cpu_s = _cpu_seconds(agent.process.pid) - cpu_before
            engine_cpu_s = _cpu_seconds(engine.process.pid) - engine_cpu_before if engine else 0.0
            engine_peak_mb = _peak_rss_mb(engine.process.pid) if engine else 0.0
            threads_after = _cpu_by_thread_name(agent.process.pid)
            memory_peak_mb = memory.stop()
            with urllib.request.urlopen(f"{agent.otlp_http}/metrics", timeout=30) as response:
                metrics_text = response.read().decode()
            phases = _writer_phases(metrics_text)
            decisions = _samples(metrics_text, "ragmon_sampler_decisions_total")
            # the report's rollup: the template's spans nest no stage in itself, so every stored span is a call
            in_report = _wait_for(agent, "SELECT sum(spans) AS n FROM spans_1m", total_spans, timeout_s=120)
            report_lag_s = time.time() - first_sent - queryable_s
            report_ms = []
            for _ in range(args.report_repeats):
                started = time.perf_counter()
                subprocess.run(
                    [sys.executable, "-m", "ragmon.cli", "report", "--json", *store_args],
                    cwd=REPO,
                    check=True,
                    capture_output=True,
                )
                report_ms.append((time.perf_counter() - started) * 1000)
            api_ms = []
            for _ in range(args.report_repeats):
                started = time.perf_counter()
                with urllib.request.urlopen(f"{agent.api}/api/report?since_s=86400", timeout=60) as response:
                    json.loads(response.read())
                api_ms.append((time.perf_counter() - started) * 1000)
            rss_mb = _peak_rss_mb(agent.process.pid) if agent.process else float("nan")
            time.sleep(max(0.0, first_sent + queryable_s + args.settle_s - time.time()))
            idle_rss_mb = _status_mb(agent.process.pid, "VmRSS")
        finally:
            agent.stop()
            if engine:
                engine.stop()
    print(f"load average at the end: {os.getloadavg()[0]:.2f} (2 cores)")
    print(
        f"spans sent: {total_spans:,} in {requests_total:,} requests of {args.spans_per_request} from {args.senders} "
        f"sender process(es); throttled responses (429/503, retried): {sum(s['throttled'] for s in stats)}"
    )
    print(f"stored and queryable: {stored:,} spans")
    print(f"sender processes' CPU while sending: {sum(s['cpu_s'] for s in stats):.1f} s (on the same 2 cores)")
    _print_rates(total_spans, acknowledged_s, queryable_s, agent_cpu_s)
    by_thread = {n: v - threads_before.get(n, 0.0) for n, v in threads_after.items()}
    by_thread["(threads that exited)"] = agent_cpu_s - sum(by_thread.values())
    busiest = sorted(by_thread.items(), key=lambda kv: -kv[1])[:6]
    print("agent CPU by thread name: " + ", ".join(f"{n} {v / agent_cpu_s:.0%}" for n, v in busiest))
    print(
        f"agent peak RSS: {rss_mb:.0f} MB (while ingesting, sampled every 50 ms: anonymous "
        f"{memory_peak_mb['RssAnon']:.0f} MB peak, file-backed {memory_peak_mb['RssFile']:.0f} MB peak); "
        f"{idle_rss_mb:.0f} MB {args.settle_s:.0f} s after the last span was queryable"
    )
    pushed_back = sum(_samples(metrics_text, "ragmon_memory_pushback_total").values())
    print(f"memory limit: {args.memory_limit or 'none'}; requests refused for memory (429): {pushed_back:,.0f}")
    if engine:
        print(
            f"engine process (ClickHouse HTTP endpoint): CPU {engine_cpu_s:.1f} s = "
            f"{engine_cpu_s / total_spans * 1e6:.1f} µs per span, peak RSS {engine_peak_mb:.0f} MB"
        )
    print("sampler decisions: " + ", ".join(f"{k} {v:,.0f}" for k, v in sorted(decisions.items())))
    print("store writer wall time by phase: " + ", ".join(f"{k} {v:.2f} s" for k, v in phases.items()))
    print(f"counted in the report's rollup: {in_report:,} spans, {report_lag_s:.2f} s after they were queryable")
    batches = _counter(metrics_text, "ragmon_store_batches_total")
    print(f"batches stored: {batches:,.0f} ({total_spans / max(batches, 1):,.0f} spans per batch)")
    print(
        f"report via the agent API: median {statistics.median(api_ms):.0f} ms; "
        f"`ragmon report` command (process start included): median {statistics.median(report_ms):.0f} ms"
    )


def _wait_for(agent: AgentProcess, sql: str, expected: int, timeout_s: float) -> int:
    """Poll a count until it is `expected`. A query may be refused while the agent is saturated (with a memory
    limit the engine answers MEMORY_LIMIT_EXCEEDED when inserts hold its share): it is asked again, as a user would."""
    deadline = time.monotonic() + timeout_s
    value = 0
    while time.monotonic() < deadline:
        try:
            rows = agent.query(sql)
        except urllib.error.HTTPError:
            rows = []
        value = int(next(iter(rows[0].values()))) if rows else value
        if value == expected:
            break
        time.sleep(0.1)
    return value


def _run_minimal_sink(template: bytes, per_sender: list[int], total_spans: int) -> None:
    """The same senders against `_minimal_sink.py`; prints the lines `_compare` reads, in the agent's words."""
    with tempfile.TemporaryDirectory(prefix="ragmon-minimal-") as tmp:
        sink = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("_minimal_sink.py")), "--data-dir", tmp],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert sink.stdout is not None
            port = int(sink.stdout.readline().split()[1])
            base = f"http://127.0.0.1:{port}"
            senders = _Senders(f"{base}/v1/traces", template, per_sender)
            first_sent = senders.first_sent
            cpu_before = _cpu_seconds(sink.pid)
            stats = senders.finish()
            stored = 0
            while stored < total_spans and time.time() - first_sent < 600:
                with urllib.request.urlopen(f"{base}/count", timeout=30) as response:
                    stored = json.loads(response.read())["spans"]
                time.sleep(0.05)
            queryable_s = time.time() - first_sent
            cpu_s = _cpu_seconds(sink.pid) - cpu_before
            rss_mb = _peak_rss_mb(sink.pid)
        finally:
            sink.kill()
            sink.wait()
    acknowledged_s = max(s["finished"] for s in stats) - first_sent
    print(f"minimal sink (benchmarks/_minimal_sink.py): {total_spans:,} spans sent, {stored:,} stored and queryable")
    _print_rates(total_spans, acknowledged_s, queryable_s, cpu_s)
    print(f"agent peak RSS: {rss_mb:.0f} MB")


# The figures `_compare` reads off a run's output (lines every version of this benchmark prints).
_FIGURES = {
    "spans/s": re.compile(r"→\s*([\d,]+) spans/s end to end"),
    "agent CPU µs/span": re.compile(r"agent CPU until queryable: .*?([\d.]+) µs per span"),
    "peak RSS MB": re.compile(r"agent peak RSS: (\d+) MB"),
}


def _compare(args: argparse.Namespace) -> None:
    """This tree against a worktree of `args.against` (or against the minimal sink), alternated `args.rounds` times;
    medians and ratios."""
    options = ["--spans", str(args.spans), "--senders", str(args.senders), "--store", args.store]
    options += ["--spans-per-request", str(args.spans_per_request), "--report-repeats", "1"]
    minimal = args.against == "minimal-sink"
    with tempfile.TemporaryDirectory(prefix="ragmon-against-") as tmp:
        baseline = REPO if minimal else Path(tmp) / "tree"
        if not minimal:
            worktree = ["git", "-C", str(REPO), "worktree", "add", "--detach", str(baseline), args.against]
            subprocess.run(worktree, check=True)
            # The same benchmark drives both trees (an older script would measure differently: its senders opened a
            # connection per request); each run still imports and serves its own tree's code.
            for script in ("ingest.py", "_minimal_sink.py", "_source_tree.py"):
                shutil.copy2(Path(__file__).with_name(script), baseline / "benchmarks" / script)
        trees = {"this tree": REPO, args.against: baseline}
        runs: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
        try:
            for round_ in range(args.rounds):
                order = list(trees) if round_ % 2 == 0 else list(reversed(trees))
                for name in order:
                    script = trees[name] / "benchmarks" / "ingest.py"
                    sink = ["--sink", "minimal"] if minimal and name == args.against else []
                    command = [sys.executable, str(script), *options, *sink]
                    # every process of the run (the senders, the agent) imports ragmon from the run's own tree
                    env = _source_tree.environment(trees[name], Path(tmp) / f"site-{round_}-{len(runs[name])}")
                    done = subprocess.run(command, capture_output=True, text=True, env=env)
                    figures = _read_figures(name, done, _FIGURES)
                    runs[name].append(figures)
                    print(f"round {round_ + 1} {name}: " + ", ".join(f"{k} {v:,.1f}" for k, v in figures.items()))
        finally:
            if not minimal:
                subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(baseline)], check=False)
    this, other = runs["this tree"], runs[args.against]
    for figure in _FIGURES:
        ours, theirs = (statistics.median(r[figure] for r in side) for side in (this, other))
        print(f"median {figure}: this tree {ours:,.1f}, {args.against} {theirs:,.1f}: ratio {ours / theirs:.3f}")


def _read_figures(
    name: str, done: subprocess.CompletedProcess[str], patterns: dict[str, re.Pattern[str]]
) -> dict[str, float]:
    """The figures a run printed, by name; a run that did not print one stops the benchmark, showing its output."""
    figures = {}
    for figure, pattern in patterns.items():
        match = pattern.search(done.stdout)
        if match is None:
            raise SystemExit(f"{name}: no '{figure}' in its output:\n{done.stdout}\n{done.stderr}")
        figures[figure] = float(match.group(1).replace(",", ""))
    return figures


_MEMORY_FIGURES = {
    "peak RSS MB": re.compile(r"agent peak RSS: (\d+) MB"),
    "spans/s": re.compile(r"→\s*([\d,]+) spans/s end to end"),
    "refused for memory": re.compile(r"requests refused for memory \(429\): ([\d,]+)"),
    "stored": re.compile(r"stored and queryable: ([\d,]+) spans"),
    "sent": re.compile(r"spans sent: ([\d,]+)"),
}


def _compare_memory_limits(args: argparse.Namespace) -> None:
    """Runs with no memory limit and at each of `args.memory_limits`, alternated over `args.rounds` rounds (the
    order turns every round, so the machine's drift falls on every limit alike); a table of medians and ratios."""
    from ragmon.memory import parse_size

    limits = ["none", *(size.strip() for size in args.memory_limits.split(",") if size.strip())]
    options = ["--spans", str(args.spans), "--senders", str(args.senders), "--store", args.store]
    options += ["--spans-per-request", str(args.spans_per_request), "--report-repeats", "1", "--settle-s", "0"]
    runs: dict[str, list[dict[str, float]]] = {limit: [] for limit in limits}
    for round_ in range(args.rounds):
        order = limits[round_ % len(limits) :] + limits[: round_ % len(limits)]
        for limit in order:
            command = [sys.executable, str(Path(__file__).resolve()), *options, "--memory-limit", limit]
            done = subprocess.run(command, capture_output=True, text=True)
            figures = _read_figures(limit, done, _MEMORY_FIGURES)
            runs[limit].append(figures)
            print(f"round {round_ + 1} limit {limit}: " + ", ".join(f"{k} {v:,.0f}" for k, v in figures.items()))
    print(f"load average at the end: {os.getloadavg()[0]:.2f} (2 cores)")
    print(f"\nmedians of {args.rounds} runs each, {args.spans:,} spans from {args.senders} senders, alternated:")
    print(
        f"{'memory_limit':>12}  {'peak RSS':>9}  {'of limit':>8}  {'spans/s':>8}  {'vs none':>7}  {'refused':>7}  "
        "unstored (all runs)"
    )
    baseline = statistics.median(r["spans/s"] for r in runs["none"])
    for limit in limits:
        peak = statistics.median(r["peak RSS MB"] for r in runs[limit])
        rate = statistics.median(r["spans/s"] for r in runs[limit])
        refused = statistics.median(r["refused for memory"] for r in runs[limit])
        # the "MB" the runs print are /proc's kB over 1024: MiB
        share = "-" if limit == "none" else f"{peak * 1024**2 / parse_size(limit):.0%}"
        ratio = rate / baseline
        # acknowledged spans not in `spans` when the run gave up waiting (10 minutes): should be 0
        unstored = sum(r["sent"] - r["stored"] for r in runs[limit])
        print(
            f"{limit:>12}  {peak:>5,.0f} MiB  {share:>8}  {rate / 1000:>6.1f}k  ×{ratio:>5.2f}  {refused:>7,.0f}  "
            f"{unstored:,.0f}"
        )


def _writer_phases(metrics_text: str) -> dict[str, float]:
    """{phase: seconds} from the agent's `ragmon_store_writer_seconds_total{phase="..."}` samples."""
    return {
        labels.split('"')[1]: v for labels, v in _samples(metrics_text, "ragmon_store_writer_seconds_total").items()
    }


def _samples(metrics_text: str, name: str) -> dict[str, float]:
    """{labels: value} of one Prometheus metric's samples (labels as written, without the braces)."""
    out = {}
    for line in metrics_text.splitlines():
        if line.startswith(name + "{"):
            labels, value = line[len(name) + 1 :].rsplit(" ", 1)
            out[labels.rstrip("}")] = float(value)
    return out


def _counter(metrics_text: str, name: str) -> float:
    """The value of an unlabelled Prometheus sample (0 when absent)."""
    for line in metrics_text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


if __name__ == "__main__":
    main()
