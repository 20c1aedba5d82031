"""ragmon's typed settings tree, read from constructor arguments, then ``RAGMON_*`` and ``OTEL_*`` variables.

Nested fields use ``__`` (``RAGMON_EXPORT__ENDPOINT``), in the manner of pydantic-settings, without the extra
dependency: ``pip install ragmon`` pulls only OpenTelemetry and pydantic. Precedence, highest first:
explicit arguments, ``RAGMON_*``, the standard ``OTEL_*`` variables, defaults.
"""

from __future__ import annotations

import contextlib
import json
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal
from urllib.parse import unquote

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from ragmon.memory import default_memory_limit, parse_size

ENV_PREFIX = "RAGMON_"
NESTED_DELIMITER = "__"

_TRUE = {"1", "true", "yes", "on"}
# OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT: a boolean in older GenAI instrumentations, a mode in newer ones
# (span_only, span_and_event, event_only, no_content); ragmon's text goes on spans, so the modes that write there
_CAPTURE_ON = _TRUE | {"span_only", "span_and_event"}


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)


class ExportSettings(_Section):
    """Where and how the SDK ships spans."""

    endpoint: str = "http://127.0.0.1:4318"  # the agent's OTLP/HTTP receiver (`/v1/traces` is added)
    headers: dict[str, SecretStr] = Field(default_factory=dict)  # sent with every export request
    api_key: SecretStr | None = None  # sent as `Authorization: Bearer <key>` to a ragmon agent
    enabled: bool = True  # false: spans are recorded and counted, never sent
    timeout_s: float = Field(default=10.0, gt=0)  # one export request's deadline
    compression: Literal["none", "gzip"] = "none"  # "gzip" for export across a network: it costs the app CPU
    # Bounded queue between the app's threads and the export thread; overflow is counted, never silent.
    queue_max_spans: int = Field(default=65_536, ge=1)
    batch_max_spans: int = Field(default=512, ge=1)  # spans per export request
    flush_interval_ms: int = Field(default=200, ge=1)  # a smaller batch goes out after this long without one
    max_attempts: int = Field(default=6, ge=1)  # per batch, on 429/502/503/504 and connection errors
    retry_deadline_s: float = Field(default=30.0, gt=0)  # per batch, its retries included; then it is dropped


class SdkSettings(_Section):
    """What the SDK records."""

    service_name: str = "unknown_service"  # the resource's `service.name`
    resource_attributes: dict[str, str] = Field(default_factory=dict)  # e.g. `service.version`, the release
    # The app's release and where it runs: the resource's `service.version` and `deployment.environment.name`
    # (beat the same keys of `resource_attributes`); ragmon reports, compares and alerts by them. '' = not sent.
    release: str = ""
    environment: str = ""
    capture_content: bool = False  # question, passages, answer, tool arguments: opt-in
    price_file: Path | None = None  # JSON overriding/extending the shipped price table
    index_vector_sample: int = Field(default=8, ge=0)  # indexed vectors checked for norm per search span
    max_attribute_chars: int = Field(default=8_192, ge=64)  # captured text longer than this is cut


PiiKind = Literal["email", "phone", "card"]
_PII_KINDS: tuple[PiiKind, ...] = ("email", "phone", "card")


class RedactionSettings(_Section):
    """PII redaction before storage (`sinks/redaction.py`; docs/RELIABILITY.md says what and where).

    `patterns` maps a name to an RE2 regular expression (ClickHouse's engine: no look-around or back-references);
    a match becomes ``[REDACTED:<name>]``. The agent has the engine compile each one at start-up and refuses to
    start, naming it, when one is invalid or matches the empty string.
    """

    enabled: bool = True
    builtins: list[PiiKind] = Field(default_factory=lambda: list(_PII_KINDS))  # "card": Luhn-valid numbers only
    patterns: dict[str, str] = Field(default_factory=dict)  # name -> RE2 pattern, e.g. {employee_id = 'EMP-\d{6}'}


class QueryBudget(_Section):
    """Limits the engine enforces on each read the agent runs for a caller — the query API, the dashboard, the
    report, quality and label reads (`ragmon.sinks.read_budget`). A read past one stops with an error naming it
    (`QueryBudgetExceeded`); the caller cannot lift it (the query guard refuses a SETTINGS clause).

    The defaults are sized for a monitoring agent on a small machine (2 cores, a 2 GiB memory limit), where the
    dashboard and other tenants must keep answering while one read runs:
    """

    # The dashboard's heaviest view (a year of the hourly rollup) and a day's report take well under a second; 30 s
    # leaves an ad-hoc query over days of raw spans room, and still answers before an HTTP client (or the server
    # backend's 60 s receive timeout) gives up. `timeout_overflow_mode` is 'throw': a cut result would look whole.
    max_execution_time_s: float = Field(default=30.0, gt=0)
    # 1e9 rows is ~10 days of raw spans at 1,000 spans/s — more than 30 s of scanning on 2 cores, so in practice
    # the time limit decides; this one stops a query the engine knows is too large (`numbers(1e12)`) before it runs.
    max_rows_to_read: int = Field(default=1_000_000_000, ge=1)
    # Uncompressed bytes read: the same bound for wide rows (payload text, attributes) that rows alone miss.
    max_bytes_to_read: int = Field(default=10 * 1024**3, ge=1)
    # One read's engine memory (`max_memory_usage`). The embedded engine's total is capped separately (the memory
    # budget's engine share, `max_server_memory_usage`); a quarter of the default 2 GiB lets the read pool's reads
    # and the writer's inserts run side by side. A GROUP BY over 1M keys fits well inside it.
    max_memory_bytes: int = Field(default=512 * 1024**2, ge=1024**2)
    # The result is turned into Python rows (~1-2 KB each): 100k rows is ~150 MB of the agent's own memory.
    max_result_rows: int = Field(default=100_000, ge=1)
    max_result_bytes: int = Field(default=64 * 1024**2, ge=1024)  # the same bound for wide result rows

    @field_validator("max_bytes_to_read", "max_memory_bytes", "max_result_bytes", mode="before")
    @classmethod
    def _bytes(cls, value: Any) -> Any:
        return parse_size(value) if isinstance(value, str) else value


class QuestionSettings(_Section):
    """Recurring questions: every decided trace's question grouped with its paraphrases (docs/questions.md)."""

    enabled: bool = True  # false: no grouping, no question-group view data
    # "auto": MiniLM when the `embeddings` extra is installed, else lexical; "lexical" never loads a model
    grouper: Literal["auto", "lexical", "minilm"] = "auto"
    lexical_threshold: float = Field(default=0.5, gt=0, le=1)  # cosine a question needs to join a lexical group
    minilm_threshold: float = Field(default=0.6, gt=0, le=1)  # cosine a question needs to join a MiniLM group
    max_groups_per_feature: int = Field(default=2000, ge=1)  # held in memory; the least-used go past it
    cache_size: int = Field(default=100_000, ge=0)  # exact repeats (normalised) remembered, skipping the grouper
    # The stage runs on its own thread and may lag: it reads at most this many sampled ranges per run, and past
    # `max_behind_ranges` rolled up and not grouped gives the oldest up (counted) rather than fall ever further behind
    ranges_per_run: int = Field(default=50, ge=1)
    max_behind_ranges: int = Field(default=2000, ge=1)


class AgentSettings(_Section):
    """The agent process (`ragmon serve`)."""

    otlp_http: str = "127.0.0.1:4318"  # the OTLP/HTTP receiver, also /health and /metrics
    otlp_grpc: str = "127.0.0.1:4317"  # "" turns the gRPC receiver off
    api: str = "127.0.0.1:4320"  # the dashboard and the report/query API
    data_dir: Path = Path(".ragmon")  # the write-ahead log, the judge queue and the embedded store
    clickhouse_url: str | None = None  # a ClickHouse server (http://host:8123) instead of the embedded store
    # A ClickHouse cluster behind clickhouse_url, whose schema `ragmon migrate --cluster NAME` created: the agent
    # then reads and writes the Distributed tables and keeps TTLs on their local tables.
    clickhouse_cluster: str | None = None
    # Below 256 MiB: a request is one write-ahead-log record, whose offset must fit `ingest_seq` (agent/intake.py).
    max_body_bytes: int = Field(default=16 * 1024 * 1024, ge=1024, le=128 * 1024 * 1024)
    # Agents sharing one ClickHouse database need distinct instance numbers (the StatefulSet ordinal, say): each
    # agent's sampler reads back its own spans by `ingest_seq`, whose top bits are this number.
    instance: int = Field(default=0, ge=0, le=4095)
    api_keys: dict[str, SecretStr] = Field(default_factory=dict)  # tenant -> key
    # tenant -> {reviewer name -> key}: keys that may also write labels of that tenant's kept traces (the review
    # queue, `ragmon.dashboard.keys`); they read as the tenant's API keys do. A name per key, so a label says who.
    reviewer_keys: dict[str, dict[str, SecretStr]] = Field(default_factory=dict)
    # Write-ahead log: what an acknowledged request survives (see ragmon/pipeline/wal.py).
    fsync: Literal["always", "interval", "never"] = "interval"
    fsync_interval_ms: int = Field(default=50, ge=1)  # with fsync "interval": what a power loss can lose
    wal_max_bytes: int = Field(default=2 * 1024**3, ge=1024 * 1024)  # a full log answers 503
    # Accepted requests waiting for the store in memory; past this they wait in the log only (agent/intake.py).
    backlog_max_bytes: int = Field(default=64 * 1024**2, ge=1024 * 1024)
    # Request bytes per stored batch. The engine's memory for an insert grows with it (many times the bytes), and
    # each insert has a fixed cost (planning the views, the sampler's queries): past 32 MiB a larger batch bought
    # memory, not throughput (benchmarks/ingest.py; docs/results.md).
    insert_batch_max_bytes: int = Field(default=32 * 1024**2, ge=1024 * 1024)
    # What the agent's resident memory (its engine included) stays under: a size ("1GiB", "768MiB", a byte count as
    # Kubernetes' downward API gives it) or "none". Default: the container's cgroup limit, else 2 GiB. The two sizes
    # above and the receivers' in-flight bytes are derived from it unless set (ragmon/agent/memory_budget.py).
    memory_limit: int | None = Field(default_factory=default_memory_limit)
    # One INSERT parses and normalises on one core: a batch goes as up to this many INSERTs at once, each of at
    # least 4 MiB (the embedded engine runs two at a time: sinks/chdb_backend.py WRITERS).
    insert_streams: int = Field(default=2, ge=1, le=16)
    content_retention_days: int = Field(default=1, ge=1)  # captured text of traces not (yet) kept
    # [agent.sampling] and [agent.alerts] stay plain tables here: their models are built on the agent's policy and
    # detector registries, which the SDK must not import. The agent validates them at start-up and `ragmon check`
    # beforehand (ragmon/sampling/config.py: SamplerConfig; ragmon/drift/rules.py: AlertsConfig).
    sampling: dict[str, Any] = Field(
        default_factory=dict, description="The tail sampler's policies and budget (docs/agent.md, Tail sampler)."
    )
    alerts: dict[str, Any] = Field(
        default_factory=dict, description="Drift rules and where alerts go (docs/agent.md, Alerts)."
    )
    redaction: RedactionSettings = Field(default_factory=RedactionSettings)
    questions: QuestionSettings = Field(default_factory=QuestionSettings)
    # What each read for a caller may cost (see QueryBudget), and per tenant what differs from it: a tenant's entry
    # names only the fields it changes (`{"acme": {"max_execution_time_s": 120}}`), the rest come from `query_budget`.
    query_budget: QueryBudget = Field(default_factory=QueryBudget)
    query_budgets: dict[str, QueryBudget] = Field(default_factory=dict)
    # Callers' reads run on this many read-only connections at once (the sampler has its own), so one slow read
    # never stalls another tenant's or the dashboard's; a read that finds them all busy waits up to `read_wait_s`,
    # then fails as retryable (503). Four: each read is parallel inside the engine too, on 2 cores.
    read_connections: int = Field(default=4, ge=1, le=64)
    read_wait_s: float = Field(default=5.0, gt=0)  # see read_connections
    # End users' feedback (`POST /v1/feedback` on the OTLP/HTTP port; docs/feedback.md). tenant -> write-only keys a
    # browser or mobile client may hold: they write that tenant's feedback and nothing else (no spans, no reads).
    feedback_keys: dict[str, list[SecretStr]] = Field(default_factory=dict)
    # Origins (scheme://host[:port]) whose pages may send feedback (CORS); none: only clients that send no Origin.
    feedback_origins: list[str] = Field(default_factory=list)
    feedback_rate_per_s: float = Field(default=10.0, gt=0)  # per key, on average; past it 429 with Retry-After
    feedback_burst: int = Field(default=20, ge=1)  # per key: requests allowed at once before the rate applies
    feedback_max_body_bytes: int = Field(default=64 * 1024, ge=1024, le=16 * 1024 * 1024)  # larger: 413
    feedback_max_items: int = Field(default=100, ge=1, le=10_000)  # items per request; more: 413
    # Feedback is acknowledged once stored; requests waiting for the store share one INSERT (group commit). Body bytes
    # of the requests waiting; past it 429 `busy` with Retry-After.
    feedback_max_waiting_bytes: int = Field(default=16 * 1024**2, ge=64 * 1024)
    feedback_wait_s: float = Field(default=10.0, gt=0, le=300)  # a request not stored in time is answered 503 (retry)

    @model_validator(mode="after")
    def _tenant_budgets(self) -> AgentSettings:
        """Each tenant's budget is the default with the fields its entry sets."""
        base = self.query_budget.model_dump()
        self.query_budgets = {
            tenant: QueryBudget.model_validate({**base, **budget.model_dump(include=budget.model_fields_set)})
            for tenant, budget in self.query_budgets.items()
        }
        return self

    @model_validator(mode="after")
    def _distinct_keys(self) -> AgentSettings:
        """A reviewer key must be nobody else's: were it also a read key (or another reviewer's), that key could
        write, or a label would name the wrong person."""
        seen: dict[str, str] = {
            key.get_secret_value(): f"api_keys[{tenant!r}]" for tenant, key in self.api_keys.items()
        }
        for tenant, reviewers in self.reviewer_keys.items():
            for name, key in reviewers.items():
                where = f"reviewer_keys[{tenant!r}][{name!r}]"
                if not name.strip() or not key.get_secret_value():
                    raise ValueError(f"{where}: a reviewer needs a name and a non-empty key")
                if key.get_secret_value() in seen:
                    raise ValueError(f"{where} is the same key as {seen[key.get_secret_value()]}: give it its own")
                seen[key.get_secret_value()] = where
        return self

    @model_validator(mode="after")
    def _distinct_feedback_keys(self) -> AgentSettings:
        """A feedback key must be nobody else's: it sits in web pages, and were it also an API or reviewer key, a
        page's visitor could send spans, read or label with it."""
        seen: dict[str, str] = {key.get_secret_value(): f"api_keys[{t!r}]" for t, key in self.api_keys.items()}
        for tenant, reviewers in self.reviewer_keys.items():
            seen.update({key.get_secret_value(): f"reviewer_keys[{tenant!r}]" for key in reviewers.values()})
        for tenant, keys in self.feedback_keys.items():
            for n, key in enumerate(keys):
                where = f"feedback_keys[{tenant!r}][{n}]"
                if not key.get_secret_value():
                    raise ValueError(f"{where}: a feedback key must not be empty")
                if key.get_secret_value() in seen:
                    raise ValueError(f"{where} is the same key as {seen[key.get_secret_value()]}: give it its own")
                seen[key.get_secret_value()] = where
        return self

    @field_validator("feedback_origins")
    @classmethod
    def _origins(cls, origins: list[str]) -> list[str]:
        for origin in origins:
            scheme, sep, rest = origin.partition("://")
            if scheme not in ("http", "https") or not sep or not rest or "/" in rest.rstrip("/") or "*" in rest:
                raise ValueError(f"a feedback origin is scheme://host[:port], no path or wildcard; got {origin!r}")
        return [origin.rstrip("/") for origin in origins]

    @field_validator("memory_limit", mode="before")
    @classmethod
    def _size(cls, value: Any) -> int | None:
        if value is None or (isinstance(value, str) and value.strip().lower() in {"none", "off", "unlimited"}):
            return None
        size = parse_size(value)
        if size < 256 * 1024**2:  # the engine's library alone is more than this resident: below it nothing runs
            raise ValueError(f"memory_limit must be at least 256MiB, got {value!r}")
        return size


class JudgeEventsSettings(_Section):
    """Scores out: each score also sent as an OpenTelemetry `gen_ai.evaluation.result` event over OTLP logs, to
    any collector or backend (judges/event_export.py). Off until `endpoint` is set; the scores are stored either way.
    """

    # OTLP/HTTP: the collector's base URL (`/v1/logs` is added unless the path already ends with it), e.g.
    # http://collector:4318. gRPC: http://collector:4317 (plain text) or https://... (TLS).
    endpoint: str | None = None
    protocol: Literal["http/protobuf", "grpc"] = "http/protobuf"
    headers: dict[str, SecretStr] = Field(default_factory=dict)  # sent with every export, e.g. authorization
    # One export's deadline, the exporter's retries (backoff, Retry-After) included; then the batch is dropped.
    timeout_s: float = Field(default=10.0, gt=0)
    # Events waiting for the export thread; past this the newest are dropped and counted (queue_full).
    queue_max_events: int = Field(default=10_000, ge=1)
    batch_max_events: int = Field(default=512, ge=1)  # events per export
    flush_interval_ms: int = Field(default=1_000, ge=1)  # a smaller batch goes out after this long without one
    service_name: str = "ragmon-judge"  # the events' resource `service.name`

    @field_validator("endpoint")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError(f"endpoint must be an http:// or https:// URL, got {value!r}")
        return value


class JudgeSettings(_Section):
    """The judge worker."""

    backend: str = "local"  # "local" (offline), "llm" (an OpenAI-compatible endpoint) or a plugin's name
    run_in_agent: bool = True  # `ragmon serve` judges kept traces itself; off when `ragmon judge` workers do
    base_url: str | None = None  # the LLM judge's endpoint, e.g. https://api.openai.com/v1
    api_key: SecretStr | None = None  # the LLM judge's key
    model: str = "gpt-4o-mini"  # the LLM judge's model; its price comes from the price table
    requests_per_minute: int = Field(default=600, ge=1)  # the LLM judge's rate limit
    budget_usd: float = Field(default=5.0, ge=0)  # the LLM judge's spend per UTC day; a call past it is not made
    # The local judge's faithfulness threshold (claims and answers), when not the model's own: one fitted on your own
    # labels (`ragmon calibrate FILE --fit-threshold`; `calibrate --from-store --threshold T` shows reviewers'
    # agreement at a candidate). Its verdicts then differ, so its version says so (`local:lexical-lr-v9.1@0.6:lexical`).
    faithfulness_threshold: float | None = Field(default=None, gt=0, lt=1)
    events: JudgeEventsSettings = Field(default_factory=JudgeEventsSettings)


class Settings(_Section):
    # An error must not echo the input: it holds keys (a duplicate reviewer key's message would show its tail).
    model_config = ConfigDict(extra="forbid", validate_default=True, hide_input_in_errors=True)

    sdk: SdkSettings = Field(default_factory=SdkSettings)
    export: ExportSettings = Field(default_factory=ExportSettings)
    agent: AgentSettings = Field(default_factory=AgentSettings)
    judge: JudgeSettings = Field(default_factory=JudgeSettings)


def parse_key_values(text: str) -> dict[str, str]:
    """Parse the OTel list form `k1=v1,k2=v2` (values percent-decoded), skipping malformed members."""
    out: dict[str, str] = {}
    for member in text.split(","):
        key, sep, value = member.partition("=")
        if sep and key.strip():
            out[key.strip()] = unquote(value.strip())
    return out


def _otel_values(env: Mapping[str, str]) -> dict[str, Any]:
    """The standard OTEL_* variables, mapped into the settings tree."""
    tree: dict[str, dict[str, Any]] = {"sdk": {}, "export": {}}
    resource = parse_key_values(env.get("OTEL_RESOURCE_ATTRIBUTES", ""))
    if resource:
        tree["sdk"]["resource_attributes"] = resource
    service = env.get("OTEL_SERVICE_NAME") or resource.get("service.name")
    if service:
        tree["sdk"]["service_name"] = service
    capture = env.get("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT")
    if capture is not None:
        tree["sdk"]["capture_content"] = capture.strip().lower() in _CAPTURE_ON
    traces_endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    base_endpoint = env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    if traces_endpoint:
        tree["export"]["endpoint"] = traces_endpoint.removesuffix("/v1/traces")
    elif base_endpoint:
        tree["export"]["endpoint"] = base_endpoint.rstrip("/")
    headers = env.get("OTEL_EXPORTER_OTLP_TRACES_HEADERS") or env.get("OTEL_EXPORTER_OTLP_HEADERS")
    if headers:
        tree["export"]["headers"] = parse_key_values(headers)
    timeout = env.get("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT") or env.get("OTEL_EXPORTER_OTLP_TIMEOUT")
    compression = env.get("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION") or env.get("OTEL_EXPORTER_OTLP_COMPRESSION")
    if compression:
        tree["export"]["compression"] = compression.strip().lower()
    if timeout:
        # The OTel variable is in milliseconds; the spec says to ignore an invalid one (ours would fail loudly).
        with contextlib.suppress(ValueError):
            tree["export"]["timeout_s"] = float(timeout) / 1000.0
    return {k: v for k, v in tree.items() if v}


def _ragmon_values(env: Mapping[str, str]) -> dict[str, Any]:
    """RAGMON_SECTION__FIELD=value → {"section": {"field": value}}; JSON objects for dict fields, JSON arrays for
    list fields (`RAGMON_AGENT__FEEDBACK_ORIGINS='["https://app.example.com"]'`). A value that merely starts with a
    bracket but is no JSON (`[::1]:4318`) stays text."""
    tree: dict[str, Any] = {}
    for name, raw in env.items():
        if not name.startswith(ENV_PREFIX):
            continue
        path = name[len(ENV_PREFIX) :].lower().split(NESTED_DELIMITER)
        value: Any = raw
        if raw.startswith(("{", "[")):
            with contextlib.suppress(json.JSONDecodeError):  # else left as text; validation names the field
                value = json.loads(raw)
        node = tree
        for part in path[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                break
        else:
            node[path[-1]] = value
    return tree


def merge_tree(base: dict[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in top.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = merge_tree(merged[key], value)
        else:
            merged[key] = value
    return merged


def _file_values(path: Path) -> dict[str, Any]:
    """A settings file: TOML (`.toml`) or JSON, shaped like the tree (`[agent]`, `[agent.sampling]`, ...)."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".toml":
        return tomllib.loads(text)
    loaded = json.loads(text)
    if not isinstance(loaded, dict):
        raise ValueError(f"{path}: expected an object at the top")
    return loaded


def load_settings(
    overrides: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    config_file: str | Path | None = None,
) -> Settings:
    """Build the settings tree. Raises pydantic.ValidationError naming the bad field (fail fast at start-up).

    Precedence: `overrides` > RAGMON_* > the config file (`config_file`, else RAGMON_CONFIG) > OTEL_* > defaults.
    """
    source = os.environ if env is None else env
    values = _otel_values(source)
    config_file = config_file or source.get("RAGMON_CONFIG")
    if config_file:
        values = merge_tree(values, _file_values(Path(config_file)))
    ragmon_values = _ragmon_values(source)
    ragmon_values.pop("config", None)  # RAGMON_CONFIG names the file; it is not a section
    values = merge_tree(values, ragmon_values)
    if overrides:
        values = merge_tree(values, overrides)
    return Settings.model_validate(values)
