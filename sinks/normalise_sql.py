"""The SELECTs that normalise OTLP spans inside ClickHouse: `normalise_select`, `spans_select`, `content_select`.

ClickHouse plans a materialized view's SELECT on every INSERT, so what the SQL costs to *plan* is paid per
insert (per batch), on top of what it costs to run per span. The SQL is therefore built from shapes that are
cheap to plan (measured on chDB 4.4 / ClickHouse 26.9; see benchmarks/collectors_decode.py):

- plain map lookups ``a['key']`` combined by ``coalesce``, instead of per-key lambdas or index columns;
- each big value computed once and handed to the next layer as a column: an alias re-used in the SELECT that
  defines it is cloned by the analyzer and planned again at every use. Where a value is read several times in
  one expression, ``arrayMap(x -> f(x, x), [value])[1]`` binds it once (a "let");
- few layers: every layer boundary makes the planner merge the expression DAGs below it again;
- no ``x = c AND y = c`` chains: the analyzer's AND-chain pass (optimize_and_compare_chain) costs
  milliseconds per chain; `ragmon.sinks.sql_values.all_of`, ``if`` or an OR of ``> 0`` tests instead;
- ``coalesce`` over the AnyValue oneof rather than ``multiIf``: it runs faster (docs/results.md).

Layers, innermost first. Layers 0–2 are `normalise_select`: it runs once per insert, in a materialized view
from the input table into a second Null table, and the two views behind that table (`spans_select`,
`content_select`: layer 3) only cast and pick. Two views over the input instead planned and ran layers 0–2 twice
per insert: sharing them cut an insert's CPU markedly (the two versions side by side in one process;
docs/results.md; `benchmarks/collectors_decode.py` shows what each view now costs).

0. per resource (before the spans are joined: referring to the resource after the span ARRAY JOIN would copy
   it, with all its spans, into every span row): service, resource feature, the kept resource attributes.
1. ARRAY JOIN scope_spans → spans; drop invalid spans (`ragmon.span_rules`, rendered by `ragmon.sinks.validity_sql`;
   the receiver counts the same ones);
   ``a``: the span's attributes as a Map key → text (`ragmon.sinks.sql_values.value_text`), plus the first
   ``exception`` event's attributes and the kept resource attributes under reserved key prefixes;
   ``key_class``: one class per entry of ``a`` (`ragmon.sinks.dialects_sql.key_class`: consumed by a dialect,
   attribute, content, OpenInference document field, reserved), computed once per key so every later test is
   an integer comparison; ``maybe_content``: whether any key is content, so spans without content skip the
   content map's work.
2. each dialect field (`ragmon.sinks.dialects_sql`) as map lookups combined by precedence, counts clamped to
   UInt32, the documents of the first present source, the attributes map and the content map (entries picked
   by class, redacted, cut).
3. exactly `ragmon.model.SPAN_COLUMNS` (or `CONTENT_COLUMNS`, for spans with content or documents), each cast to
   its declared type; stage, cost from the price table (`ragmon.sinks.pricing_sql`), top-1 score and similarity gap
   from the scores.

Decisions kept from the Python normaliser this replaces:

- feature: span ``ragmon.feature``, else resource ``ragmon.feature``, else the service name (never copied from
  other spans of the trace: a column must not depend on batching).
- eval_run: span ``ragmon.eval.run``, else resource ``ragmon.eval.run``, else '' (production traffic).
- retrieved_sources: per retrieved document, the paragraph or source the dialect's documents name (ragmon's
  and OTel GenAI's JSON ``source``, OpenInference's ``document.metadata`` keys:
  `ragmon.sinks.dialects.openinference.SOURCE_METADATA_KEYS`); '' where they name none.
- release: ``service.version``, the span's own else its resource's (where OTel puts it); environment:
  ``deployment.environment.name``, else the older ``deployment.environment``, the same way; '' when not sent.
- stage: ragmon > OTel GenAI > OpenInference > OpenLLMetry (see `sql_dialects`); a root without one is
  ``request``, any other span ``other``.
- cost: ``ragmon.cost_usd`` or ``llm.cost.total`` when given; else from the price table when the span has a
  model and usage; NULL for an unknown model or no usage.
- similarity_gap: rank-1 minus rank-10 score (or the last one when fewer); NULL with fewer than two scores.
- error_type: ``error.type``, else the first exception event's ``exception.type``; ``_OTHER`` for an error
  status without either.
- attributes: unmapped span attributes as text (strings verbatim, other scalars as text, arrays and kvlists as
  JSON, bytes as base64), cut to `max_attribute_chars`; plus ``service.version`` and
  ``deployment.environment[.name]`` and ``ragmon.eval.run`` from the resource, ``exception.message`` and
  ``otel.status_description``;
  ``gen_ai.retrieval.documents`` stays when it is not a JSON list of documents. ``ragmon.tenant`` is dropped:
  the tenant is the envelope's, stamped from the API key. Exception event attributes and the kept resource
  attributes are read as scalars (`ragmon.sinks.sql_values.scalar_text`): an array or kvlist there reads as empty.
- content: captured text (`sql_dialects.CONTENT_KEYS`, prefixes, document text) plus exception stack traces,
  cut to `max_content_chars`.
- redaction (`ragmon.sinks.redaction`, on by default): every value of `attributes` and `content` (so the
  exception message, status message and stack trace too), and the span's name, user, session and error_type,
  before the cut (a cut must not leave half an email behind). Ids, timestamps, numbers and the low-cardinality
  labels (service, feature, model, provider, stage) are not redacted: they are not free text.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Final

from ragmon.sinks import dialects_sql as D
from ragmon.sinks.backend import quote_string as quote
from ragmon.sinks.pricing_sql import cost_expression, price_rates
from ragmon.sinks.redaction import DEFAULT as DEFAULT_REDACTION
from ragmon.sinks.redaction import Redaction
from ragmon.sinks.sql_values import UINT32_MAX, raw, scalar_text, text, truncated, value_text
from ragmon.sinks.validity_sql import valid_span

from ragmon import attributes as A
from ragmon import span_rules
from ragmon.model import CONTENT_COLUMNS, SPAN_COLUMNS
from ragmon.pricing import PriceTable, default_price_table

__all__ = ["content_select", "normalise_select", "spans_select"]

# `ragmon.eval.run` is also a resource attribute of an eval run's spans (`ragmon.evaluation.eval_run`): kept so the
# span's `eval_run` column and `attributes` have it whichever of the two carried it.
_RESOURCE_KEPT: Final = (
    A.SERVICE_VERSION,
    A.DEPLOYMENT_ENVIRONMENT_NAME,
    A.DEPLOYMENT_ENVIRONMENT,
    A.RAGMON_EVAL_RUN,
)
_DEFAULT_SERVICE: Final = "unknown_service"  # OTel's own fallback for a resource without service.name
_COUNTS: Final = ("input_tokens", "output_tokens", "cached_input_tokens", "search_units")
_TEXT_DEFAULTS: Final = {"user": "''", "session": "''", "model": "''", "provider": "''"}
_EXCEPTION_ATTRIBUTES: Final = "arrayFirst(e -> e.name = 'exception', sp.events).attributes"
# ``a`` also holds, under these prefixes (a NUL byte: no real attribute key starts with one; span keys that do
# are dropped), the attributes of the first exception event and the resource attributes kept on every span, as
# `scalar_text` (they are strings by convention): one map, one lookup syntax, one value_text lambda.
# A span's own key starting with a NUL byte becomes a bare NUL in ``a``, so it can pose as neither; its class
# (from the key as sent) drops it.
_OWN_KEYS: Final = (
    "if(arrayExists(k -> startsWith(k, '\\0'), sp.attributes.key), "
    "arrayMap(k -> if(startsWith(k, '\\0'), '\\0', k), sp.attributes.key), sp.attributes.key)"
)
_EXCEPTION_PREFIX: Final = "\\0e:"  # SQL text of the literal's content
_RESOURCE_PREFIX: Final = "\\0r:"


def _exception(key: str) -> str:
    """Nullable(String): attribute `key` of the span's first exception event."""
    return f"a['{_EXCEPTION_PREFIX}{key}']"


# The store's start-time bounds, still named where tests/collectors/test_validity_rules.py reads them; they are the
# rule table's (`ragmon.span_rules`), rendered into the WHERE below.
MIN_START_TIME_NS: Final = span_rules.MIN_START_TIME_NS
MAX_START_TIME_NS: Final = span_rules.MAX_START_TIME_NS

_DOCS_TYPE: Final = "Tuple(Array(String), Array(Nullable(Float64)), Array(String))"
# Span-row columns every layer hands on unchanged.
_SPAN_KEYS: Final = (
    "tenant",
    "ingest_seq",
    "trace_id",
    "span_id",
    "parent_span_id",
    "name",
    "start_ns",
    "end_ns",
    "status_code",
)


@lru_cache(maxsize=1)
def _shipped_prices() -> PriceTable:
    return default_price_table()


def _select(columns: list[str] | tuple[str, ...], source: str, tail: str = "") -> str:
    """SELECT `columns` FROM `source` (a subquery, or a table name) `tail`."""
    body = ",\n    ".join(columns)
    if source.lstrip().upper().startswith("SELECT"):
        source = f"({source}\n)"
    return f"SELECT\n    {body}\nFROM {source}{tail}"


def _span_rows(source_table: str) -> str:
    """Layers 0 and 1: one row per valid span with its attribute maps (see the module docstring)."""
    zero_span = "unhex('0000000000000000')"
    resource_string = "arrayFirst(kv -> kv.key = {key}, rs.resource.attributes).value.string_value"
    kept = ", ".join(map(quote, _RESOURCE_KEPT))
    resources = _select(
        [
            "tenant",
            "ingest_seq",
            # only a string service.name names the service
            f"ifNull(nullIf({resource_string.format(key=quote('service.name'))}, ''), {quote(_DEFAULT_SERVICE)})"
            " AS service",
            f"nullIf({resource_string.format(key=quote(A.RAGMON_FEATURE))}, '') AS resource_feature",
            f"arrayMap(k -> concat('{_RESOURCE_PREFIX}', k), arrayFilter(k -> k IN ({kept}), "
            "rs.resource.attributes.key)) AS resource_keys",
            f"arrayMap(kv -> {scalar_text('kv.value')}, arrayFilter(kv -> kv.key IN ({kept}), rs.resource.attributes))"
            " AS resource_texts",
            "rs.scope_spans AS scope_spans",
        ],
        source_table,
        "\nARRAY JOIN resource_spans AS rs",
    )
    return _select(
        [
            "tenant",
            "ingest_seq",
            "service",
            "resource_feature",
            "lower(hex(sp.trace_id)) AS trace_id",
            "lower(hex(sp.span_id)) AS span_id",
            # an all-zero parent id means "no parent", as some SDKs send it
            f"if(sp.parent_span_id IN ('', {zero_span}), '', lower(hex(sp.parent_span_id))) AS parent_span_id",
            "sp.name AS name",
            "sp.start_time_unix_nano AS start_ns",
            "sp.end_time_unix_nano AS end_ns",
            "sp.status.code AS status_code",
            "sp.status.message AS status_message",
            # texts are made per part and then concatenated: concatenating the AnyValue arrays copies them
            f"mapFromArrays(arrayConcat({_OWN_KEYS}, "
            f"arrayMap(k -> concat('{_EXCEPTION_PREFIX}', k), {_EXCEPTION_ATTRIBUTES}.key), resource_keys), "
            f"arrayConcat(arrayMap(v -> {value_text('v')}, sp.attributes.value), "
            f"arrayMap(v -> {scalar_text('v')}, {_EXCEPTION_ATTRIBUTES}.value), resource_texts)) AS a",
            # one class per entry of `a` (sql_dialects.key_class); the exception and resource entries are reserved
            f"arrayConcat(arrayMap(k -> {D.key_class('k')}, sp.attributes.key), "
            f"arrayMap(k -> toUInt8({D.KEY_RESERVED}), {_EXCEPTION_ATTRIBUTES}.key), "
            f"arrayMap(k -> toUInt8({D.KEY_RESERVED}), resource_keys)) AS {D.KEY_CLASSES}",
            # most spans carry no content and skip the content map's work
            f"has({D.KEY_CLASSES}, {D.KEY_CONTENT}) OR has(sp.events.name, 'exception') AS maybe_content",
        ],
        resources,
        "\nARRAY JOIN scope_spans AS ss\nARRAY JOIN ss.spans AS sp\n"
        # invalid spans: the rules ragmon.collectors.validate counts them by (partial_success), from one table
        f"WHERE {valid_span('sp')}",
    )


def _dialects() -> tuple[list[D.DialectSql], list[D.Documents]]:
    dialects = [make() for make in D.DIALECTS]
    documents = [source for dialect in dialects for source in dialect.documents]
    return dialects, documents


def _combined(dialects: list[D.DialectSql], field: str, default: str | None = None) -> str:
    exprs = [d.fields[field] for d in dialects if field in d.fields]
    if default is not None:
        exprs.append(default)
    return exprs[0] if len(exprs) == 1 else f"coalesce({', '.join(exprs)})"


def _documents(documents: list[D.Documents]) -> str:
    """Layer 2: (ids, scores, sources) of the first present source (multiIf evaluates only the branch it takes);
    scores only when there is one finite score per id, so ids and scores stay aligned; sources parallel to the
    ids, '' per id when the source names none."""
    branches = "".join(f"{s.present}, ({s.ids}, {s.scores}, {s.sources}), " for s in documents)
    chosen = f"CAST(multiIf({branches}([], [], [])), {quote(_DOCS_TYPE)})"
    # arrayMap over a one-element array binds the chosen documents to `d` (a "let": no copy of the expression)
    return (
        "arrayMap(d -> (d.1, if(if(length(d.2) = length(d.1), arrayAll(s -> ifNull(isFinite(s), 0), d.2), 0), "
        "arrayMap(s -> assumeNotNull(s), d.2), []), "
        f"if(length(d.3) = length(d.1), d.3, arrayMap(i -> '', d.1))), [{chosen}])[1] AS docs"
    )


# Final expressions of the columns spans and content share (layer 3, over the normalised rows).
_COMMON_COLUMNS: Final = {
    "tenant": "tenant",
    "trace_id": "trace_id",
    "span_id": "span_id",
    "parent_span_id": "parent_span_id",
    "name": "texts[1]",  # redacted
    # '' from a dialect: it names the span but there is no RAG stage (e.g. an agent or CHAIN span)
    "stage": "if(given_stage != '', given_stage, if(parent_span_id = '', 'request', 'other'))",
    "start_time": "fromUnixTimestamp64Nano(toInt64(start_ns))",  # absolute ticks: the zone is display only
    "duration_ms": "(end_ns - start_ns) / 1e6",
    "status": "multiIf(status_code = 1, 'ok', status_code = 2, 'error', 'unset')",
    "retrieved_ids": "docs.1",
    "retrieved_scores": "docs.2",
    "ingest_seq": "ingest_seq",
}


def _own_else_resource(*keys: str) -> str:
    """The first non-empty of the span's own attributes `keys`, then its resource's; '' when none is sent."""
    own = [text(key) for key in keys]
    resource = [f"nullIf(a['{_RESOURCE_PREFIX}{key}'], '')" for key in keys]
    return f"coalesce({', '.join((*own, *resource))}, '')"


def _cut_map(expr: str, max_chars: int) -> str:
    return f"mapApply((k, t) -> (k, {truncated('t', max_chars)}), {expr})"


def _kept(key_class: int) -> str:
    """The span's own attributes of class `key_class` (`sql_dialects.key_class`) that have a value."""
    keep = f"c = {key_class} AND v IS NOT NULL"
    classes = D.KEY_CLASSES
    keys = f"arrayFilter((k, v, c) -> {keep}, mapKeys(a), mapValues(a), {classes})"
    values = f"arrayMap(v -> assumeNotNull(v), arrayFilter((v, c) -> {keep}, mapValues(a), {classes}))"
    return f"mapFromArrays({keys}, {values})"


def _check_limit(name: str, value: int) -> None:
    if type(value) is not int or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


def _select_list(columns: tuple[tuple[str, str], ...], exprs: dict[str, str]) -> list[str]:
    return [f"CAST({exprs[name]} AS {type_}) AS {name}" for name, type_ in columns]


def _count(dialects: list[D.DialectSql], field: str) -> str:
    # truncated to an integer and clamped to UInt32; 0 when no dialect gave a finite number
    return f"toUInt32(least(greatest(ifNull({_combined(dialects, field)}, 0), 0), {UINT32_MAX})) AS {field}"


def normalise_select(
    source_table: str,
    *,
    max_attribute_chars: int = 4096,
    max_content_chars: int = 65536,
    redaction: Redaction = DEFAULT_REDACTION,
) -> str:
    """Layers 0–2 over `source_table` (the Null input table): every field of a span, both the slim ones and its
    content, redacted and cut, computed once for `spans_select` and `content_select` to read."""
    _check_limit("max_attribute_chars", max_attribute_chars)
    _check_limit("max_content_chars", max_content_chars)
    dialects, documents = _dialects()
    # gen_ai.retrieval.documents stays an attribute when neither it nor OpenInference keys gave documents
    parsed = " OR ".join(s.present for s in documents[2:])
    genai_documents = f"if({parsed}, '', ifNull({raw(A.GEN_AI_RETRIEVAL_DOCUMENTS)}, ''))"
    exception_message = f"ifNull({_exception('exception.message')}, '')"
    attributes = _cut_map(
        # resource attributes first: the span's own keys win
        redaction.map_values(
            f"mapUpdate(mapUpdate(mapApply((k, v) -> (substring(k, 4), ifNull(v, '')), "
            f"mapFilter((k, v) -> startsWith(k, '{_RESOURCE_PREFIX}'), a)), "
            f"{_kept(D.KEY_ATTRIBUTE)}), "
            # added to the span's own attributes: status message, exception message (unless the span has one),
            # gen_ai.retrieval.documents that are not a JSON list of documents; empty ones are left out
            "mapFilter((k, v) -> v != '', map('otel.status_description', status_message, "
            f"'exception.message', if(mapContains(a, 'exception.message'), '', {exception_message}), "
            f"{quote(A.GEN_AI_RETRIEVAL_DOCUMENTS)}, {genai_documents})))"
        ),
        max_attribute_chars,
    )
    stacktrace = f"ifNull({_exception('exception.stacktrace')}, '')"
    content = _cut_map(
        redaction.map_values(
            f"mapUpdate({_kept(D.KEY_CONTENT)}, "
            f"mapFilter((k, v) -> v != '', map('exception.stacktrace', {stacktrace})))"
        ),
        max_content_chars,
    )
    fields = [
        *_SPAN_KEYS,
        "service",
        f"coalesce({_combined(dialects, 'stage')}, '') AS given_stage",
        f"coalesce({_combined(dialects, 'feature')}, resource_feature, service) AS feature",
        # the span's own marker, else its resource's; '' = production traffic
        f"coalesce({text(A.RAGMON_EVAL_RUN)}, nullIf(a['{_RESOURCE_PREFIX}{A.RAGMON_EVAL_RUN}'], ''), '') AS eval_run",
        f"{_own_else_resource(A.SERVICE_VERSION)} AS release",
        f"{_own_else_resource(A.DEPLOYMENT_ENVIRONMENT_NAME, A.DEPLOYMENT_ENVIRONMENT)} AS environment",
        *(f"{_combined(dialects, f, default)} AS {f}" for f, default in _TEXT_DEFAULTS.items()),
        *(_count(dialects, f) for f in _COUNTS),
        *(
            f"{_combined(dialects, f)} AS {f}"
            for f in ("cost_usd", "top1_score", "similarity_gap", "norm_deviation", "ttft_ms")
        ),
        f"coalesce({_combined(dialects, 'error_type')}, nullIf({_exception('exception.type')}, ''), "
        "if(status_code = 2, '_OTHER', '')) AS error_type",
        _documents(documents),
        f"{attributes} AS attributes",
        # The free-text scalars redacted by one expression (the redaction SQL is long, and planned on every insert)
        f"arrayMap(t -> {redaction.sql('t')}, [name, user, session, error_type]) AS texts",
        f"if(maybe_content, {content}, map()) AS content",
    ]
    return _select(fields, _span_rows(source_table))


def spans_select(source_table: str, prices: PriceTable | None = None) -> str:
    """Layer 3 over `source_table` (the normalised rows of `normalise_select`): exactly `SPAN_COLUMNS`, in order."""
    prices = prices if prices is not None else _shipped_prices()
    # the price lookup is bound to `r` once (arrayMap over a one-element array), then read per rate
    cost = cost_expression(
        rates="r",
        input_tokens="input_tokens",
        output_tokens="output_tokens",
        cached_tokens="cached_input_tokens",
        search_units="search_units",
    )
    exprs = {
        **_COMMON_COLUMNS,
        "feature": "feature",
        "eval_run": "eval_run",
        "release": "release",
        "environment": "environment",
        "retrieved_sources": "docs.3",
        "user": "texts[2]",
        "session": "texts[3]",
        "service": "service",
        "error_type": "texts[4]",
        "model": "model",
        "provider": "provider",
        "input_tokens": "input_tokens",
        "output_tokens": "output_tokens",
        "cached_input_tokens": "cached_input_tokens",
        "cost_usd": f"coalesce(cost_usd, arrayMap(r -> {cost}, [{price_rates(prices, 'model')}])[1])",
        "top1_score": "coalesce(top1_score, if(empty(docs.2), NULL, docs.2[1]))",
        # rank 1 minus rank 10, or minus the last rank when there are fewer
        "similarity_gap": (
            "coalesce(similarity_gap, if(length(docs.2) < 2, NULL, docs.2[1] - docs.2[least(10, length(docs.2))]))"
        ),
        "norm_deviation": "norm_deviation",
        "ttft_ms": "ttft_ms",
        "attributes": "attributes",
    }
    return _select(_select_list(SPAN_COLUMNS, exprs), source_table)


def content_select(source_table: str) -> str:
    """Layer 3 over `source_table` (the normalised rows): exactly `CONTENT_COLUMNS`, only for spans with captured
    content or retrieved documents."""
    return _select(
        _select_list(CONTENT_COLUMNS, {**_COMMON_COLUMNS, "content": "content"}),
        source_table,
        "\nWHERE notEmpty(content) OR notEmpty(retrieved_ids)",
    )
