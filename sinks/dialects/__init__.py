"""Attribute dialects: what ragmon knows about each one, one module per dialect.

- `ragmon_names`: the ragmon SDK's own `ragmon.*` names;
- `otel_genai`: OpenTelemetry's GenAI semantic conventions (current and older names) and the general OTel names
  ragmon reads;
- `openinference`: OpenInference (Arize Phoenix's instrumentations);
- `openllmetry`: OpenLLMetry / Traceloop.

A dialect's module holds its names and how each is read: which attribute keys are the span's fields
(`span_fields()`, SQL over the span's attribute map, into the `spans` columns), which are captured text
(`CONTENT_KEYS`, `CONTENT_PREFIXES`: kept for the sampler, never in `attributes`), and the content roles it can give
— prompt, output, input and output value, retrieval query, documents, tool calls — as names or SQL over a span's
captured text. `common` is what they share. Precedence across dialects and how their expressions combine are not
here: `ragmon.sinks.dialects_sql` (fields and key routing, `DIALECTS`) and `ragmon.sinks.content_sql` (roles). A
new dialect is a module here, listed in those two.
"""
