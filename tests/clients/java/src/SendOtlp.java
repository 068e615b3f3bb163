// Sends COUNT increments (value i % 5 + 1, attribute client=CASE) through the
// OpenTelemetry Java SDK's OTLP metric exporters:
//
//   java SendOtlp PROTOCOL TEMPORALITY TARGET NAME CASE COUNT
//
// PROTOCOL: grpc (OtlpGrpcMetricExporter) or http (OtlpHttpMetricExporter), both with
// gzip; TEMPORALITY: delta or cumulative; TARGET: host:port. A LongCounter with the
// resource attribute service.name=clients. The reader exports only when flushed: four
// times while sending (so a cumulative stream sends rising points) and at shutdown.
// Exits 1 when an export fails; prints {"dropped": 0} (the SDK reports no drops).

import io.opentelemetry.api.common.AttributeKey;
import io.opentelemetry.api.common.Attributes;
import io.opentelemetry.api.metrics.LongCounter;
import io.opentelemetry.exporter.otlp.http.metrics.OtlpHttpMetricExporter;
import io.opentelemetry.exporter.otlp.metrics.OtlpGrpcMetricExporter;
import io.opentelemetry.sdk.common.CompletableResultCode;
import io.opentelemetry.sdk.metrics.SdkMeterProvider;
import io.opentelemetry.sdk.metrics.export.AggregationTemporalitySelector;
import io.opentelemetry.sdk.metrics.export.MetricExporter;
import io.opentelemetry.sdk.metrics.export.PeriodicMetricReader;
import io.opentelemetry.sdk.resources.Resource;
import java.time.Duration;
import java.util.concurrent.TimeUnit;

public class SendOtlp {
    public static void main(String[] args) {
        if (args.length != 6) {
            System.err.println("usage: SendOtlp PROTOCOL TEMPORALITY TARGET NAME CASE COUNT");
            System.exit(2);
        }
        String protocol = args[0], temporality = args[1], target = args[2], name = args[3], clientCase = args[4];
        int count = Integer.parseInt(args[5]);
        AggregationTemporalitySelector selector;
        if (temporality.equals("delta")) {
            selector = AggregationTemporalitySelector.deltaPreferred();
        } else if (temporality.equals("cumulative")) {
            selector = AggregationTemporalitySelector.alwaysCumulative();
        } else {
            throw new IllegalArgumentException("unknown temporality " + temporality);
        }
        MetricExporter exporter;
        if (protocol.equals("grpc")) {
            exporter = OtlpGrpcMetricExporter.builder().setEndpoint("http://" + target)
                    .setCompression("gzip").setAggregationTemporalitySelector(selector).build();
        } else if (protocol.equals("http")) {
            exporter = OtlpHttpMetricExporter.builder().setEndpoint("http://" + target + "/v1/metrics")
                    .setCompression("gzip").setAggregationTemporalitySelector(selector).build();
        } else {
            throw new IllegalArgumentException("unknown protocol " + protocol);
        }
        // Exports only when flushed: the run decides when points go out.
        PeriodicMetricReader reader = PeriodicMetricReader.builder(exporter).setInterval(Duration.ofHours(1)).build();
        SdkMeterProvider provider = SdkMeterProvider.builder()
                .setResource(Resource.getDefault().merge(Resource.create(
                        Attributes.of(AttributeKey.stringKey("service.name"), "clients"))))
                .registerMetricReader(reader).build();
        LongCounter counter = provider.get("countersink.clients").counterBuilder(name).build();
        Attributes attributes = Attributes.of(AttributeKey.stringKey("client"), clientCase);
        int every = Math.max(count / 4, 1);
        boolean ok = true;
        for (int i = 0; i < count; i++) {
            counter.add(i % 5 + 1, attributes);
            if ((i + 1) % every == 0) {
                ok &= waitFor(provider.forceFlush());
            }
        }
        ok &= waitFor(provider.forceFlush());
        ok &= waitFor(provider.shutdown());
        System.out.println("{\"dropped\": 0}");
        System.exit(ok ? 0 : 1);
    }

    private static boolean waitFor(CompletableResultCode result) {
        result.join(30, TimeUnit.SECONDS);
        if (!result.isSuccess()) {
            System.err.println("export failed: " + result.getFailureThrowable());
        }
        return result.isSuccess();
    }
}
