// Command otlp-send sends COUNT increments (value i % 5 + 1, attribute client=CASE)
// through the OpenTelemetry Go SDK's OTLP metric exporters:
//
//	otlp-send PROTOCOL TEMPORALITY TARGET NAME CASE COUNT
//
// PROTOCOL is grpc (otlpmetricgrpc) or http (otlpmetrichttp), both with gzip;
// TEMPORALITY is delta or cumulative; TARGET is host:port. A monotonic Int64Counter
// with the resource attribute service.name=clients. The reader exports only when
// flushed: four times while sending (so a cumulative stream sends rising points) and
// at shutdown. Exits 1 when an export fails; prints {"dropped": 0} (the SDK reports no
// drops of its own).
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/resource"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
)

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(1)
}

func main() {
	if len(os.Args) != 7 {
		fmt.Fprintln(os.Stderr, "usage: otlp-send PROTOCOL TEMPORALITY TARGET NAME CASE COUNT")
		os.Exit(2)
	}
	protocol, temporality, target, name, clientCase := os.Args[1], os.Args[2], os.Args[3], os.Args[4], os.Args[5]
	count, err := strconv.Atoi(os.Args[6])
	if err != nil {
		fail("%v", err)
	}
	selector := func(sdkmetric.InstrumentKind) metricdata.Temporality { return metricdata.CumulativeTemporality }
	if temporality == "delta" {
		selector = func(sdkmetric.InstrumentKind) metricdata.Temporality { return metricdata.DeltaTemporality }
	} else if temporality != "cumulative" {
		fail("unknown temporality %s", temporality)
	}
	ctx := context.Background()
	var exporter sdkmetric.Exporter
	switch protocol {
	case "grpc":
		exporter, err = otlpmetricgrpc.New(ctx, otlpmetricgrpc.WithEndpoint(target), otlpmetricgrpc.WithInsecure(),
			otlpmetricgrpc.WithCompressor("gzip"), otlpmetricgrpc.WithTemporalitySelector(selector))
	case "http":
		exporter, err = otlpmetrichttp.New(ctx, otlpmetrichttp.WithEndpoint(target), otlpmetrichttp.WithInsecure(),
			otlpmetrichttp.WithCompression(otlpmetrichttp.GzipCompression), otlpmetrichttp.WithTemporalitySelector(selector))
	default:
		fail("unknown protocol %s", protocol)
	}
	if err != nil {
		fail("exporter: %v", err)
	}
	// Exports only when flushed: the run decides when points go out.
	reader := sdkmetric.NewPeriodicReader(exporter, sdkmetric.WithInterval(time.Hour))
	res := resource.NewWithAttributes(semconv.SchemaURL, semconv.ServiceName("clients"))
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader), sdkmetric.WithResource(res))
	counter, err := provider.Meter("countersink.clients").Int64Counter(name)
	if err != nil {
		fail("counter: %v", err)
	}
	attrs := metric.WithAttributes(attribute.String("client", clientCase))
	every := count / 4
	if every < 1 {
		every = 1
	}
	ok := true
	flush := func() {
		flushCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := provider.ForceFlush(flushCtx); err != nil {
			fmt.Fprintln(os.Stderr, "flush:", err)
			ok = false
		}
	}
	for i := 0; i < count; i++ {
		counter.Add(ctx, int64(i%5+1), attrs)
		if (i+1)%every == 0 {
			flush()
		}
	}
	flush()
	if err := provider.Shutdown(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "shutdown:", err)
		ok = false
	}
	out, _ := json.Marshal(map[string]int{"dropped": 0})
	fmt.Println(string(out))
	if !ok {
		os.Exit(1)
	}
}
