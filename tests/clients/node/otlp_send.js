// Sends COUNT increments (value i % 5 + 1, attribute client=CASE) through the
// OpenTelemetry JS SDK's OTLP metric exporters:
//
//   node otlp_send.js PROTOCOL TEMPORALITY TARGET NAME CASE COUNT
//
// PROTOCOL: grpc (@opentelemetry/exporter-metrics-otlp-grpc) or http
// (@opentelemetry/exporter-metrics-otlp-http, which sends OTLP/HTTP JSON), both with gzip; TEMPORALITY: delta or cumulative;
// TARGET: host:port. A counter with the resource attribute service.name=clients. The
// reader exports only when flushed: four times while sending (so a cumulative stream
// sends rising points) and at shutdown. Exits 1 when an export fails; prints
// {"dropped": 0} (the SDK reports no drops of its own).
'use strict';
const { MeterProvider, PeriodicExportingMetricReader } = require('@opentelemetry/sdk-metrics');
const { resourceFromAttributes } = require('@opentelemetry/resources');
const http = require('@opentelemetry/exporter-metrics-otlp-http');
const grpc = require('@opentelemetry/exporter-metrics-otlp-grpc');

async function main() {
  const [protocol, temporality, target, name, clientCase, countText] = process.argv.slice(2);
  const count = Number(countText);
  const preference = {
    delta: http.AggregationTemporalityPreference.DELTA,
    cumulative: http.AggregationTemporalityPreference.CUMULATIVE,
  }[temporality];
  if (preference === undefined) throw new Error(`unknown temporality ${temporality}`);
  let exporter;
  if (protocol === 'http') {
    exporter = new http.OTLPMetricExporter({
      url: `http://${target}/v1/metrics`, compression: 'gzip', temporalityPreference: preference,
    });
  } else if (protocol === 'grpc') {
    exporter = new grpc.OTLPMetricExporter({
      url: `http://${target}`, compression: 'gzip', temporalityPreference: preference,
    });
  } else {
    throw new Error(`unknown protocol ${protocol}`);
  }
  // Exports only when flushed: the run decides when points go out.
  const reader = new PeriodicExportingMetricReader({ exporter, exportIntervalMillis: 3_600_000 });
  const provider = new MeterProvider({
    resource: resourceFromAttributes({ 'service.name': 'clients' }),
    readers: [reader],
  });
  const counter = provider.getMeter('countersink.clients').createCounter(name);
  const every = Math.max(Math.floor(count / 4), 1);
  let ok = true;
  const flush = async () => {
    try {
      await provider.forceFlush();
    } catch (error) {
      process.stderr.write(`export failed: ${error}\n`);
      ok = false;
    }
  };
  for (let i = 0; i < count; i += 1) {
    counter.add((i % 5) + 1, { client: clientCase });
    if ((i + 1) % every === 0) await flush();
  }
  await flush();
  await provider.shutdown();
  process.stdout.write(`${JSON.stringify({ dropped: 0 })}\n`);
  process.exitCode = ok ? 0 : 1;
}

main().catch((error) => {
  process.stderr.write(`${error.stack || error}\n`);
  process.exitCode = 1;
});
