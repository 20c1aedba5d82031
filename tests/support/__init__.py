"""Code the tests (and benchmarks) share that ragmon does not ship: a ClickHouse-HTTP endpoint over the embedded
engine (`chhttp`), `spans` rows written straight into the store (`span_rows`), synthetic spans and OTLP bodies
with known numbers (`synth`) and what each drift signal means, restated in numpy (`signal_oracle`)."""
