// Make N spans with the official OpenTelemetry JS SDK and export them with its OTLP/HTTP exporter, as a Node app
// would; prints the spans sent as JSON and exits 0 only if every export succeeded.
//
//   node send.js --exporter proto|json --gzip on|off --url http://127.0.0.1:4318/v1/traces [--spans 40]
//                [--batch 512] [--header name=value ...]
//
// Each trace is a root `rag.request` with three children carrying gen_ai.* attributes. The spans are collected in
// memory, then handed to the exporter in batches of --batch (BatchSpanProcessor's default size), one export at a
// time, so the result of each export is known exactly; the SDK's processors only log a failed export.
'use strict';

const { context, trace, SpanKind } = require('@opentelemetry/api');
const { ExportResultCode } = require('@opentelemetry/core');
const { resourceFromAttributes } = require('@opentelemetry/resources');
const { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } = require('@opentelemetry/sdk-trace-base');

function parseArgs(argv) {
  const args = { exporter: '', gzip: '', url: '', spans: 40, batch: 512, headers: {} };
  for (let i = 0; i < argv.length; i += 2) {
    const [name, value] = [argv[i], argv[i + 1]];
    if (value === undefined) throw new Error(`${name} needs a value`);
    if (name === '--exporter') args.exporter = value;
    else if (name === '--gzip') args.gzip = value;
    else if (name === '--url') args.url = value;
    else if (name === '--spans') args.spans = Number(value);
    else if (name === '--batch') args.batch = Number(value);
    else if (name === '--header') {
      const at = value.indexOf('=');
      args.headers[value.slice(0, at)] = value.slice(at + 1);
    } else throw new Error(`unknown option ${name}`);
  }
  if (!['proto', 'json'].includes(args.exporter)) throw new Error('--exporter proto|json');
  if (!['on', 'off'].includes(args.gzip)) throw new Error('--gzip on|off');
  if (!args.url) throw new Error('--url is required');
  if (!(args.spans > 0) || !(args.batch > 0)) throw new Error('--spans and --batch must be positive');
  return args;
}

function makeSpans(count) {
  const memory = new InMemorySpanExporter();
  const provider = new BasicTracerProvider({
    resource: resourceFromAttributes({ 'service.name': 'js-rag-app', 'telemetry.sdk.language': 'nodejs' }),
    spanProcessors: [new SimpleSpanProcessor(memory)],
  });
  const tracer = provider.getTracer('ragmon-js-check', '1.0.0');
  const children = [
    ['embeddings text-embedding-3-small', { 'gen_ai.operation.name': 'embeddings', 'gen_ai.request.model': 'text-embedding-3-small', 'gen_ai.usage.input_tokens': 12 }],
    ['retrieval docs', { 'gen_ai.operation.name': 'retrieval', 'gen_ai.data_source.id': 'docs' }],
    ['chat gpt-4o-mini', { 'gen_ai.operation.name': 'chat', 'gen_ai.request.model': 'gpt-4o-mini', 'gen_ai.usage.input_tokens': 1000, 'gen_ai.usage.output_tokens': 100 }],
  ];
  let made = 0;
  for (let t = 0; made < count; t++) {
    const root = tracer.startSpan('rag.request', { kind: SpanKind.SERVER, attributes: { 'ragmon.feature': 'js-docs-qa', 'ragmon.stage': 'request', 'trace.index': t } });
    made++;
    const parent = trace.setSpan(context.active(), root);
    for (const [name, attributes] of children) {
      if (made >= count) break;
      tracer.startSpan(name, { kind: SpanKind.CLIENT, attributes }, parent).end();
      made++;
    }
    root.end();
  }
  return memory.getFinishedSpans();
}

function exporterFor(args) {
  const options = { url: args.url, headers: args.headers, timeoutMillis: 20000 };
  if (args.gzip === 'on') options.compression = 'gzip';
  const module = args.exporter === 'proto' ? '@opentelemetry/exporter-trace-otlp-proto' : '@opentelemetry/exporter-trace-otlp-http';
  const { OTLPTraceExporter } = require(module);
  return new OTLPTraceExporter(options);
}

function exportOnce(exporter, spans) {
  return new Promise(resolve => exporter.export(spans, resolve));
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const spans = makeSpans(args.spans);
  const exporter = exporterFor(args);
  let failed = null;
  for (let at = 0; at < spans.length && !failed; at += args.batch) {
    const result = await exportOnce(exporter, spans.slice(at, at + args.batch));
    if (result.code !== ExportResultCode.SUCCESS) failed = result.error || new Error('export failed');
  }
  await exporter.shutdown();
  const sent = spans.map(span => ({
    trace_id: span.spanContext().traceId,
    span_id: span.spanContext().spanId,
    parent_span_id: span.parentSpanContext ? span.parentSpanContext.spanId : '',
    name: span.name,
  }));
  process.stdout.write(JSON.stringify({ spans: sent }) + '\n');
  if (failed) {
    process.stderr.write(`export failed: ${failed.message || failed}\n`);
    process.exitCode = 1;
  }
}

main().catch(error => {
  process.stderr.write(`send.js: ${error.stack || error}\n`);
  process.exitCode = 2;
});
