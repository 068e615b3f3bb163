// Command otlp-load sends OTLP/gRPC metric exports as fast as a receiver answers them,
// for tests/bench/otlp_collector.sh:
//
//	otlp-load TARGET CONNECTIONS POINTS_PER_REQUEST SERIES SECONDS
//
// Every request holds POINTS_PER_REQUEST delta points of one monotonic sum (value 1,
// timestamped when the run starts), spread over SERIES attribute sets (`key` = 0..SERIES-1),
// so an aggregator keeps a fixed, small number of rows. CONNECTIONS goroutines, each with
// its own gRPC connection, send the same request back to back for SECONDS and count the
// answers. Prints one JSON line: requests and points answered OK, failures, seconds, and
// points per second. A request answered with an error or a partial success is a failure,
// not a point.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func request(points, series int, at time.Time) pmetricotlp.ExportRequest {
	md := pmetric.NewMetrics()
	rm := md.ResourceMetrics().AppendEmpty()
	rm.Resource().Attributes().PutStr("service.name", "otlp-load")
	metric := rm.ScopeMetrics().AppendEmpty().Metrics().AppendEmpty()
	metric.SetName("otlp.load.points")
	sum := metric.SetEmptySum()
	sum.SetIsMonotonic(true)
	sum.SetAggregationTemporality(pmetric.AggregationTemporalityDelta)
	for i := 0; i < points; i++ {
		dp := sum.DataPoints().AppendEmpty()
		dp.SetStartTimestamp(pcommon.NewTimestampFromTime(at.Add(-time.Second)))
		dp.SetTimestamp(pcommon.NewTimestampFromTime(at))
		dp.SetIntValue(1)
		dp.Attributes().PutStr("key", strconv.Itoa(i%series))
	}
	return pmetricotlp.NewExportRequestFromMetrics(md)
}

func main() {
	if len(os.Args) != 6 {
		fmt.Fprintln(os.Stderr, "usage: otlp-load TARGET CONNECTIONS POINTS_PER_REQUEST SERIES SECONDS")
		os.Exit(2)
	}
	target := os.Args[1]
	var numbers [4]int
	for i := range numbers {
		n, err := strconv.Atoi(os.Args[i+2])
		if err != nil || n < 1 {
			fmt.Fprintln(os.Stderr, "not a positive number:", os.Args[i+2])
			os.Exit(2)
		}
		numbers[i] = n
	}
	connections, points, series, seconds := numbers[0], numbers[1], numbers[2], numbers[3]
	req := request(points, series, time.Now())
	var requests, failures atomic.Int64
	var firstError atomic.Value
	deadline := time.Now().Add(time.Duration(seconds) * time.Second)
	started := time.Now()
	var wg sync.WaitGroup
	for c := 0; c < connections; c++ {
		conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			fmt.Fprintln(os.Stderr, "connect:", err)
			os.Exit(1)
		}
		defer conn.Close()
		client := pmetricotlp.NewGRPCClient(conn)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				resp, err := client.Export(ctx, req)
				cancel()
				if err == nil && resp.PartialSuccess().RejectedDataPoints() > 0 {
					err = fmt.Errorf("partial success: %d rejected: %s", resp.PartialSuccess().RejectedDataPoints(), resp.PartialSuccess().ErrorMessage())
				}
				if err != nil {
					failures.Add(1)
					firstError.CompareAndSwap(nil, err.Error())
					continue
				}
				requests.Add(1)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(started).Seconds()
	out := map[string]any{
		"requests":       requests.Load(),
		"points":         requests.Load() * int64(points),
		"failures":       failures.Load(),
		"seconds":        elapsed,
		"points_per_sec": float64(requests.Load()*int64(points)) / elapsed,
	}
	if e := firstError.Load(); e != nil {
		out["first_error"] = e
	}
	line, _ := json.Marshal(out)
	fmt.Println(string(line))
}
