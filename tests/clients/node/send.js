// Sends COUNT increments (value i % 5 + 1, tag client:CASE) through hot-shots:
//
//   node send.js OPTION TRANSPORT TARGET NAME CASE COUNT
//
// OPTION: "plain" (no buffering), "buffered" (maxBufferSize 8192, flushed every
// 1000 ms and on close), "datadog" (Datadog mode: client telemetry, origin detection).
// TRANSPORT: udp (TARGET host:port) or uds (a Unix datagram socket path; needs the
// optional unix-dgram module). Prints one JSON line: the errors the client reported
// (to the error handler or to the send callbacks).
'use strict';
const StatsD = require('hot-shots');

const [option, transport, target, name, clientCase, countText] = process.argv.slice(2);
const count = Number(countText);
let errors = 0;
const options = {
  errorHandler: () => { errors += 1; },
  includeDataDogTags: false,
};
if (transport === 'udp') {
  const [host, port] = target.split(':');
  Object.assign(options, { host, port: Number(port) });
} else if (transport === 'uds') {
  Object.assign(options, { protocol: 'uds', path: target });
} else {
  throw new Error(`unsupported transport ${transport}`);
}
if (option === 'plain') {
  options.maxBufferSize = 0;
} else if (option === 'buffered') {
  options.maxBufferSize = 8192;
} else if (option === 'datadog') {
  Object.assign(options, { datadog: true, maxBufferSize: 8192 });
} else {
  throw new Error(`unknown option ${option}`);
}

const client = new StatsD(options);
for (let i = 0; i < count; i += 1) {
  client.increment(name, (i % 5) + 1, [`client:${clientCase}`], (error) => {
    if (error) errors += 1;
  });
}
client.close((error) => {
  if (error) errors += 1;
  process.stdout.write(`${JSON.stringify({ dropped: errors })}\n`);
});
