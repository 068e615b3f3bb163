// Etsy statsd (npm package `statsd` 0.9.0) for loopback benchmarking.
// No backend: nothing leaves the box. flushInterval is 1 h so the in-memory counters
// (per key, and statsd.metrics_received) are never reset during a run; the benchmark reads
// them over the management port with `counters`. The port numbers are rewritten by run.sh.
{
  port: 8125,
  address: "127.0.0.1",
  mgmt_port: 8126,
  mgmt_address: "127.0.0.1",
  flushInterval: 3600000,
  backends: [],
  deleteCounters: false,
  dumpMessages: false
}
