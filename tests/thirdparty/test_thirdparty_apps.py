"""RAG apps ragmon did not instrument, end to end: LangChain and LlamaIndex apps traced by OpenInference or by
OpenLLMetry, and a plain openai-client app under the official OTel GenAI instrumentation or OpenInference's.

Per app × instrumentation (one module-scoped run each): the scripted OpenAI server on loopback answers the app
(`apps.common.scripted_reply`: known token usage; q6's LLM call fails with a 500 and no retry), the app exports
OTLP/HTTP to a real `ragmon serve` that keeps every trace (error policy, then a baseline of 1.0) and judges in
the agent with the local judge, and the tests read the store back through the agent's API and `ragmon report`:

- each request is one trace, whose spans are all stored (nested spans of one stage included);
- the report counts one generate call and, where the app retrieves, one search call per request (a span nested in
  a span of its own stage is not a second call);
- a request's generate usage, counted once, is the tokens the LLM reported, with a cost;
- the failed LLM call's trace is stored with status error, and kept;
- every answered trace's payload holds the question, the answer and the passages (the prompt's messages for the
  app that retrieves by itself);
- faithfulness is judged (status ok) on answered traces, and the invented answer scores below the copied ones.

`counted` and `usage_counted` state the counting rules over a trace's stored spans; `judge_context` and
`judged_against_prompt` what the judge's context is. `python -m tests.thirdparty.dump_spans` shows what each
instrumentation sends.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from ragmon.pricing import default_price_table
from ragmon.testing import ScriptedOpenAIServer
from tests.agent.harness import REPO, AgentProcess
from tests.thirdparty.apps import common
from tests.thirdparty.dump_spans import run_app

pytestmark = pytest.mark.slow

# Every trace kept: the error policy first (so the failed request's reasons say "error"), then all the rest.
# A trace whose root never arrives (an instrumentation that leaves spans open) is decided after 10 s, not 30.
SAMPLING = {
    "policies": [{"type": "error"}, {"type": "baseline", "rate": 1.0}],
    "decision_grace_s": 0.5,
    "decision_timeout_s": 10,
}
AGENT_ENV = {
    "RAGMON_AGENT__SAMPLING": json.dumps(SAMPLING),
    "RAGMON_JUDGE__RUN_IN_AGENT": "true",
    "RAGMON_JUDGE__BACKEND": "local",
}
STORED_TIMEOUT_S = 30.0
KEPT_TIMEOUT_S = 45.0  # decision_timeout_s, plus the writer
JUDGED_TIMEOUT_S = 60.0
RELEASE = "3.1.4"  # every app sends it as its resource's service.version

ANSWERED = [q for q in common.QUESTIONS if q.answer is not None]
FAILED = [q for q in common.QUESTIONS if q.answer is None]
COPIED = [q for q in common.QUESTIONS if q.kind == "copied"]
INVENTED = [q for q in common.QUESTIONS if q.kind == "invented"]


@dataclass(frozen=True)
class Combination:
    app: str
    instrumentation: str
    retrieves: bool  # a retrieval span is in the trace (the framework apps); else the passages are in the prompt
    packages: tuple[tuple[str, str], ...]  # (import name, distribution) the app needs

    @property
    def id(self) -> str:
        return f"{self.app}-{self.instrumentation}"

    def missing(self) -> list[str]:
        return [dist for module, dist in self.packages if not _installed(module)]


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


_LANGCHAIN = (("langchain_core", "langchain-core"), ("langchain_openai", "langchain-openai"))
_LLAMAINDEX = (
    ("llama_index.core", "llama-index-core"),
    ("llama_index.llms.openai", "llama-index-llms-openai"),
    ("llama_index.embeddings.openai", "llama-index-embeddings-openai"),
)
_OPENAI = (("openai", "openai"),)
_TRACELOOP_OPENAI = (("opentelemetry.instrumentation.openai", "opentelemetry-instrumentation-openai"),)
COMBINATIONS = (
    Combination(
        "langchain",
        "openinference",
        True,
        (*_LANGCHAIN, ("openinference.instrumentation.langchain", "openinference-instrumentation-langchain")),
    ),
    Combination(
        "langchain",
        "openllmetry",
        True,
        (
            *_LANGCHAIN,
            ("opentelemetry.instrumentation.langchain", "opentelemetry-instrumentation-langchain"),
            *_TRACELOOP_OPENAI,
        ),
    ),
    Combination(
        "llamaindex",
        "openinference",
        True,
        (*_LLAMAINDEX, ("openinference.instrumentation.llama_index", "openinference-instrumentation-llama-index")),
    ),
    Combination(
        "llamaindex",
        "openllmetry",
        True,
        (
            *_LLAMAINDEX,
            ("opentelemetry.instrumentation.llamaindex", "opentelemetry-instrumentation-llamaindex"),
            *_TRACELOOP_OPENAI,
        ),
    ),
    Combination(
        "openai",
        "genai",
        False,
        (
            *_OPENAI,
            ("opentelemetry.instrumentation.openai_v2", "opentelemetry-instrumentation-openai-v2"),
            ("opentelemetry.util.genai", "opentelemetry-util-genai"),
        ),
    ),
    Combination(
        "openai",
        "openinference",
        False,
        (*_OPENAI, ("openinference.instrumentation.openai", "openinference-instrumentation-openai")),
    ),
)


# Same-stage nesting is not collapsed yet (issue "Any instrumented app, fully": one span per call): LlamaIndex under
# --- the counting rules, stated over a trace's stored spans ---------------------------------------------------
def _same_stage_ancestors(spans: list[dict[str, Any]], span: dict[str, Any]) -> list[dict[str, Any]]:
    by_id = {s["span_id"]: s for s in spans}
    out, at = [], span
    while at["parent_span_id"] in by_id and len(out) < len(spans):
        at = by_id[at["parent_span_id"]]
        if at["stage"] == span["stage"]:
            out.append(at)
    return out


def counted(spans: list[dict[str, Any]], stage: str) -> list[dict[str, Any]]:
    """The spans of one trace that are calls of `stage`: those without an ancestor of their stage (OpenInference
    nests OpenAI.chat in OpenAI.predict and ._retrieve in .retrieve; OpenLLMetry one VectorIndexRetriever.task in
    another). The report must count exactly these (`sinks/rollup_sql.py`)."""
    return [s for s in spans if s["stage"] == stage and not _same_stage_ancestors(spans, s)]


def usage_counted(spans: list[dict[str, Any]], stage: str) -> list[dict[str, Any]]:
    """The spans whose tokens and cost count: those carrying usage with no same-stage ancestor carrying it."""

    def carries(s: dict[str, Any]) -> bool:
        return s["input_tokens"] + s["output_tokens"] > 0 or s["cost_usd"] is not None

    return [
        s
        for s in spans
        if s["stage"] == stage and carries(s) and not any(carries(a) for a in _same_stage_ancestors(spans, s))
    ]


def judge_context(payload: dict[str, Any]) -> list[str]:
    """The texts the judge checks the answer against: the retrieved passages, or — for an app traced only at its
    LLM client — the answering call's prompt messages, less the user's question."""
    if context_source(payload) == "prompt":
        return [
            _field(m, "content", 1)
            for m in payload["messages"]
            if not (_field(m, "role", 0) == "user" and _field(m, "content", 1) == payload["question"])
        ]
    return [_field(p, "text", 2) for p in payload["passages"]]


def context_source(row: dict[str, Any]) -> str:
    """What a payload's (or a score's) context is: 'passages', 'prompt' or ''."""
    return str(row.get("context_source", ""))


def judged_against_prompt(payload: dict[str, Any], score: dict[str, Any]) -> bool:
    """The payload's context is the prompt, and the faithfulness score says it was judged against it."""
    return context_source(payload) == "prompt" and context_source(score) == "prompt"


# --- one run per combination ---------------------------------------------------------------------------------------
@dataclass
class Run:
    combination: Combination
    agent: AgentProcess
    results: dict[str, Any]
    spans: list[dict[str, Any]] = field(default_factory=list)  # stored rows of the requests' traces
    payloads: dict[str, dict[str, Any]] = field(default_factory=dict)  # by trace id
    scores: dict[str, dict[str, Any]] = field(default_factory=dict)  # faithfulness, by trace id
    report: list[dict[str, Any]] = field(default_factory=list)
    report_text: str = ""  # `ragmon report` as a user reads it, quality section included
    stored_spans_total: int = 0
    waited: dict[str, str] = field(default_factory=dict)  # what a wait gave up on, for failure messages

    def record(self, question: common.Question) -> dict[str, Any]:
        return next(r for r in self.results["questions"] if r["id"] == question.id)

    def trace_ids(self, question: common.Question) -> list[str]:
        return list(self.record(question)["trace_ids"])

    def trace_id(self, question: common.Question) -> str:
        """The request's one trace (the test of one trace per request checks there is exactly one)."""
        ids = self.trace_ids(question)
        assert len(ids) == 1, f"{question.id} made {len(ids)} traces, not one: {ids}"
        return ids[0]

    def spans_of(self, question: common.Question) -> list[dict[str, Any]]:
        ids = set(self.trace_ids(question))
        return [s for s in self.spans if s["trace_id"] in ids]

    def payload(self, question: common.Question) -> dict[str, Any] | None:
        return self.payloads.get(self.trace_id(question))

    def score(self, question: common.Question) -> dict[str, Any] | None:
        return self.scores.get(self.trace_id(question))

    def report_totals(self, stage: str) -> dict[str, Any]:
        """The report's figures for one stage, summed over features (one app, one agent: all rows are ours)."""
        rows = [r for r in self.report if r["stage"] == stage]
        costs = [r["cost_usd"] for r in rows if r["cost_usd"] is not None]
        return {
            "requests": sum(r["requests"] for r in rows),
            "errors": sum(r["errors"] for r in rows),
            "input_tokens": sum(r["input_tokens"] for r in rows),
            "output_tokens": sum(r["output_tokens"] for r in rows),
            "cost_usd": sum(costs) if costs else None,
        }

    def describe(self, question: common.Question) -> str:
        """The stored spans of a request's trace(s), for failure messages."""
        lines = [f"{question.id} traces {self.trace_ids(question)}:"]
        for s in sorted(self.spans_of(question), key=lambda s: s["start_time"]):
            lines.append(
                f"  {s['name']!r} stage={s['stage']} status={s['status']} parent={s['parent_span_id'] or '-'} "
                f"tokens={s['input_tokens']}/{s['output_tokens']} cost={s['cost_usd']} model={s['model']!r}"
            )
        if self.waited:
            lines.append(f"  (waits given up: {self.waited})")
        return "\n".join(lines)


@pytest.fixture(scope="module", params=COMBINATIONS, ids=lambda c: c.id)
def run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    combination: Combination = request.param
    missing = combination.missing()
    if missing:  # they are in the test extra: a missing one is a broken install, not a reason to skip
        pytest.fail(f"{combination.id} needs {', '.join(missing)} (pip install -e '.[test]')")
    base = tmp_path_factory.mktemp(combination.id)
    agent = AgentProcess(base / "data", grpc=False, extra_env=AGENT_ENV).start()
    try:
        results_path = base / "results.json"
        with ScriptedOpenAIServer(default=common.scripted_reply) as server:
            app = run_app(
                combination.app,
                combination.instrumentation,
                server.base_url,
                otlp=agent.otlp_http,
                results=results_path,
                # the release as OTel apps send it: resource attributes from the standard variable
                extra_env={"OTEL_RESOURCE_ATTRIBUTES": f"service.version={RELEASE},deployment.environment.name=prod"},
            )
            handler_errors = server.handler_errors
        assert app.returncode == 0, f"the {combination.id} app failed:\n{app.stdout}\n{app.stderr}"
        assert not handler_errors, f"the scripted server could not answer the app: {handler_errors}"
        run = Run(combination, agent, json.loads(results_path.read_text()))
        _collect(run)
        yield run
    finally:
        agent.stop()


def _sql_list(values: list[str]) -> str:
    """Trace ids as an SQL tuple (hex only, so nothing else can reach the query); ('') when there are none."""
    ids = [v for v in sorted(set(values)) if v and all(c in "0123456789abcdef" for c in v)]
    return "(" + (",".join(f"'{v}'" for v in ids) or "''") + ")"


def _wait(run: Run, name: str, check: Any, timeout_s: float) -> None:
    """Poll `check()` until it is true or the deadline passes (then note it: the assertions say what is missing)."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            run.waited[name] = f"gave up after {timeout_s:.0f} s"
            return
        time.sleep(0.2)


def _collect(run: Run) -> None:
    """Wait until the agent has stored every span the app ended, decided (kept) every request's trace and judged
    the answered ones, then read what the tests look at."""
    agent = run.agent
    all_ids = [t for r in run.results["questions"] for t in r["trace_ids"]]
    answered_ids = [t for q in ANSWERED for t in run.trace_ids(q)]
    traces = _sql_list(all_ids)

    def stored() -> bool:
        run.stored_spans_total = int(agent.query("SELECT count() AS n FROM spans")[0]["n"])
        return run.stored_spans_total >= run.results["spans_ended"]

    def kept() -> bool:
        rows = agent.query(f"SELECT uniqExact(trace_id) AS n FROM payloads WHERE trace_id IN {traces}")
        return int(rows[0]["n"]) >= len(set(all_ids))

    def judged() -> bool:
        kept_answered = [t for t in answered_ids if t in _payload_ids(agent, traces)]
        rows = agent.query(
            "SELECT uniqExact(trace_id) AS n FROM scores WHERE metric = 'faithfulness' "
            f"AND trace_id IN {_sql_list(kept_answered)}"
        )
        return bool(kept_answered) and int(rows[0]["n"]) >= len(set(kept_answered))

    _wait(run, "spans stored", stored, STORED_TIMEOUT_S)
    _wait(run, "traces kept", kept, KEPT_TIMEOUT_S)
    _wait(run, "answers judged", judged, JUDGED_TIMEOUT_S)
    _wait(run, "rolled up", lambda: agent.metric("ragmon_rollup_lag_seconds") == 0, STORED_TIMEOUT_S)
    run.spans = agent.query(
        "SELECT trace_id, span_id, parent_span_id, name, stage, status, error_type, model, input_tokens, release,"
        " environment,"
        f" output_tokens, cost_usd, toString(start_time) AS start_time FROM spans FINAL WHERE trace_id IN {traces}"
    )
    run.payloads = {
        row["trace_id"]: row
        for row in agent.query(
            "SELECT trace_id, question, answer, passages, messages, context_source, sampling_reasons"
            f" FROM payloads FINAL WHERE trace_id IN {traces}"
        )
    }
    run.scores = {
        row["trace_id"]: row
        for row in agent.query(
            "SELECT trace_id, status, value, explanation, context_source, release FROM scores FINAL"
            f" WHERE metric = 'faithfulness' AND run_name = '' AND trace_id IN {traces}"
        )
    }
    run.report = json.loads(_cli("report", "--json", "--since", "1h", "--data-dir", str(agent.data_dir)))["stages"]
    run.report_text = _cli("report", "--since", "1h", "--data-dir", str(agent.data_dir))


def _payload_ids(agent: AgentProcess, traces: str) -> set[str]:
    rows = agent.query(f"SELECT DISTINCT trace_id FROM payloads WHERE trace_id IN {traces}")
    return {row["trace_id"] for row in rows}


def _cli(*args: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "ragmon.cli", *args], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def _field(value: Any, name: str, index: int) -> Any:
    """A tuple element as the API returns it: an object with names, or a list."""
    return value[name] if isinstance(value, dict) else value[index]


# --- the acceptance criteria ---------------------------------------------------------------------------------------
def test_the_app_answered_as_scripted(run: Run) -> None:
    """Sanity of the set-up: each answered question got its scripted answer; the failing one failed."""
    got = {r["id"]: (r["answer"], r["error"] is not None) for r in run.results["questions"]}
    assert got == {q.id: (q.answer, q.answer is None) for q in common.QUESTIONS}


def test_each_request_is_one_trace_and_every_span_is_stored(run: Run) -> None:
    """One trace per request, and every span the app ended is stored (nested same-stage spans included)."""
    assert {q.id: len(run.trace_ids(q)) for q in common.QUESTIONS} == {q.id: 1 for q in common.QUESTIONS}
    stored = {q.id: len({s["span_id"] for s in run.spans_of(q)}) for q in common.QUESTIONS}
    assert stored == {q.id: run.record(q)["spans"] for q in common.QUESTIONS}, run.waited
    assert run.stored_spans_total == run.results["spans_ended"]


def test_report_counts_one_generate_and_one_search_call_per_request(run: Run) -> None:
    stages = ["generate", "search"] if run.combination.retrieves else ["generate"]
    requests = len(common.QUESTIONS)
    per_request = {q.id: {stage: len(counted(run.spans_of(q), stage)) for stage in stages} for q in common.QUESTIONS}
    assert per_request == {q.id: dict.fromkeys(stages, 1) for q in common.QUESTIONS}, "\n".join(
        run.describe(q) for q in common.QUESTIONS if per_request[q.id] != dict.fromkeys(stages, 1)
    )
    assert {stage: run.report_totals(stage)["requests"] for stage in stages} == dict.fromkeys(stages, requests)
    assert run.report_totals("generate")["errors"] == len(FAILED)


def test_tokens_and_cost_per_request_are_what_the_llm_reported(run: Run) -> None:
    prices = default_price_table()
    tokens = {
        q.id: (
            sum(s["input_tokens"] for s in usage_counted(run.spans_of(q), "generate")),
            sum(s["output_tokens"] for s in usage_counted(run.spans_of(q), "generate")),
        )
        for q in ANSWERED
    }
    assert tokens == {q.id: (q.prompt_tokens, q.completion_tokens) for q in ANSWERED}, "\n".join(
        run.describe(q) for q in ANSWERED
    )
    costs = {q.id: [s["cost_usd"] for s in usage_counted(run.spans_of(q), "generate")] for q in ANSWERED}
    assert all(c is not None for cs in costs.values() for c in cs), costs
    expected = {q.id: prices.cost_usd(common.CHAT_MODEL, q.prompt_tokens, q.completion_tokens) for q in ANSWERED}
    assert {k: pytest.approx(sum(v)) for k, v in costs.items()} == expected
    totals = run.report_totals("generate")
    assert (totals["input_tokens"], totals["output_tokens"]) == (
        sum(q.prompt_tokens for q in ANSWERED),
        sum(q.completion_tokens for q in ANSWERED),
    )
    assert totals["cost_usd"] == pytest.approx(sum(expected.values()))


def test_the_release_the_app_sent_is_on_its_spans_its_scores_and_the_releases_read(run: Run) -> None:
    """`service.version` and `deployment.environment.name` on the app's resource (OTEL_RESOURCE_ATTRIBUTES): every
    stored span says them, every score of the app's traces carries the release, and `ragmon report --release`
    counts the requests the rollups counted, under that release."""
    assert run.spans and {(s["release"], s["environment"]) for s in run.spans} == {(RELEASE, "prod")}
    assert run.scores and {score["release"] for score in run.scores.values()} == {RELEASE}
    document = json.loads(
        _cli("report", "--json", "--since", "1h", "--release", RELEASE, "--data-dir", str(run.agent.data_dir))
    )
    requests = sum(r["requests"] for r in run.report if r["stage"] == "request")
    assert sum(r["requests"] for r in document["stages"] if r["stage"] == "request") == requests
    assert [(r["release"], r["environments"], r["requests"]) for r in document["releases"]] == [
        (RELEASE, ["prod"], requests)
    ]


def test_the_failed_llm_call_is_an_error_trace_and_kept(run: Run) -> None:
    for question in FAILED:
        calls = counted(run.spans_of(question), "generate")
        assert [s["status"] for s in calls] == ["error"], run.describe(question)
        payload = run.payload(question)
        assert payload is not None, f"{question.id}'s trace was not kept\n{run.describe(question)}"
        assert "error" in payload["sampling_reasons"]


def test_answered_traces_keep_question_answer_and_passages(run: Run) -> None:
    for question in ANSWERED:
        payload = run.payload(question)
        assert payload is not None, f"{question.id}'s trace was not kept\n{run.describe(question)}"
        assert (payload["question"], payload["answer"]) == (question.text, question.answer), question.id
        context = judge_context(payload)
        assert context and all(text.strip() for text in context), (question.id, payload)
        source = common.document_text(question.source)
        assert any(source in text for text in context), (question.id, question.source, context)
        if run.combination.retrieves:
            assert context_source(payload) == "passages", (question.id, payload)
            assert all(text in dict(common.DOCUMENTS).values() for text in context), (question.id, context)
        else:
            assert context_source(payload) == "prompt", (question.id, payload)


def test_faithfulness_is_judged_and_the_invented_answer_scores_lower(run: Run) -> None:
    scores = {q.id: run.score(q) for q in ANSWERED}
    assert {k: (s or {}).get("status") for k, s in scores.items()} == {q.id: "ok" for q in ANSWERED}, (
        scores,
        run.waited,
    )
    if not run.combination.retrieves:
        for question in ANSWERED:
            payload, score = run.payload(question), scores[question.id]
            assert payload is not None and score is not None
            assert judged_against_prompt(payload, score), (question.id, payload, score)
    values = {k: s["value"] for k, s in scores.items() if s is not None}
    for invented in INVENTED:
        for copied in COPIED:
            assert values[invented.id] < values[copied.id], values


def test_quality_shows_in_the_report_the_dashboard_and_the_drill_down(run: Run) -> None:
    """What a user of such an app sees: judged faithfulness in `ragmon report`, in the dashboard's quality series,
    and the judge's verdicts on a trace's page."""
    # the judged-quality section only: later sections (releases, questions) name faithfulness too, as columns
    section = run.report_text.split("judged quality (kept traces", 1)[-1].split("\n\n", 1)[0]
    lines = [line.split() for line in section.splitlines() if " faithfulness " in f" {line} "]
    assert lines, run.report_text
    ok = sum(int(cells[cells.index("faithfulness") + 2].split("/")[0]) for cells in lines)
    assert ok >= len(ANSWERED), run.report_text
    quality = _dashboard(run, "quality?since_s=3600")
    faithfulness = [series for series in quality["series"] if series["metric"] == "faithfulness"]
    assert faithfulness and sum(faithfulness[0]["n"]) >= len(ANSWERED), quality
    for question in (*COPIED, *INVENTED):
        trace = _dashboard(run, f"trace?id={run.trace_id(question)}")
        verdicts = [score for score in trace["scores"] if score["metric"] == "faithfulness"]
        assert [v["status"] for v in verdicts] == ["ok"], (question.id, trace["scores"])
        assert verdicts[0]["claims"], (question.id, verdicts)


def _dashboard(run: Run, path: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{run.agent.api}/api/dashboard/{path}", timeout=30) as response:
        body: dict[str, Any] = json.loads(response.read())
        return body
