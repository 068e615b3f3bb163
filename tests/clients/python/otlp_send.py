"""COUNT increments (value i % 5 + 1) through the OpenTelemetry Python SDK's OTLP metric
exporter: `otlp_send.py http|grpc delta|cumulative HOST:PORT NAME CLIENT_ID COUNT`.

A monotonic Counter with the attribute `client`, exported with gzip in the temporality
asked for; the reader is flushed four times while sending (so a cumulative stream sends
rising points) and at shutdown. Exits 1 when an export fails. Prints {"dropped": 0}: the
SDK reports no drops of its own.
"""

import json
import sys

from opentelemetry.sdk.metrics import Counter, MeterProvider
from opentelemetry.sdk.metrics.export import AggregationTemporality, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource


def main():
    protocol, temporality, target, name, client, count = sys.argv[1:7]
    preferred = {
        Counter: AggregationTemporality.DELTA if temporality == "delta" else AggregationTemporality.CUMULATIVE
    }
    if protocol == "http":
        from opentelemetry.exporter.otlp.proto.http import Compression
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

        exporter = OTLPMetricExporter(
            endpoint=f"http://{target}/v1/metrics", compression=Compression.Gzip, preferred_temporality=preferred
        )
    else:
        from grpc import Compression
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter

        exporter = OTLPMetricExporter(
            endpoint=f"http://{target}", insecure=True, compression=Compression.Gzip, preferred_temporality=preferred
        )
    # Exports only when flushed: the run decides when points go out.
    reader = PeriodicExportingMetricReader(exporter, export_interval_millis=3_600_000)
    provider = MeterProvider(resource=Resource.create({"service.name": "clients"}), metric_readers=[reader])
    counter = provider.get_meter("countersink.clients").create_counter(name)
    n = int(count)
    ok = True
    for i in range(n):
        counter.add(i % 5 + 1, {"client": client})
        if (i + 1) % max(n // 4, 1) == 0:
            ok = provider.force_flush(timeout_millis=30_000) and ok
    ok = provider.force_flush(timeout_millis=30_000) and ok
    provider.shutdown()
    print(json.dumps({"dropped": 0}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
