// Command send sends COUNT increments (value i % 5 + 1, tag client:CASE) through
// datadog-go's statsd client:
//
//	send OPTION TRANSPORT TARGET NAME CASE COUNT
//
// OPTION is "default" (client-side aggregation and buffering, as shipped),
// "no-aggregation" (every increment becomes a line) or "channel" (channel mode,
// no aggregation). TRANSPORT is udp (TARGET host:port), uds or uds_stream (a socket
// path). Prints one JSON line with the client's own telemetry.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"

	"github.com/DataDog/datadog-go/v5/statsd"
)

func main() {
	if len(os.Args) != 7 {
		fmt.Fprintln(os.Stderr, "usage: send OPTION TRANSPORT TARGET NAME CASE COUNT")
		os.Exit(2)
	}
	option, transport, target, name, clientCase := os.Args[1], os.Args[2], os.Args[3], os.Args[4], os.Args[5]
	count, err := strconv.Atoi(os.Args[6])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	addr := target
	switch transport {
	case "uds":
		addr = "unixgram://" + target
	case "uds_stream":
		addr = "unixstream://" + target
	}
	var options []statsd.Option
	switch option {
	case "default":
	case "no-aggregation":
		options = append(options, statsd.WithoutClientSideAggregation())
	case "channel":
		options = append(options, statsd.WithoutClientSideAggregation(), statsd.WithChannelMode())
	default:
		fmt.Fprintln(os.Stderr, "unknown option", option)
		os.Exit(2)
	}
	client, err := statsd.New(addr, options...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	tags := []string{"client:" + clientCase}
	for i := 0; i < count; i++ {
		if err := client.Count(name, int64(i%5+1), tags, 1); err != nil {
			fmt.Fprintln(os.Stderr, "count:", err)
		}
	}
	// Close flushes the aggregator and the buffers.
	if err := client.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "close:", err)
	}
	t := client.GetTelemetry()
	out, _ := json.Marshal(map[string]uint64{
		"dropped":          t.TotalDroppedOnReceive + t.TotalPayloadsDropped,
		"payloads_sent":    t.TotalPayloadsSent,
		"payloads_dropped": t.TotalPayloadsDropped,
		"dropped_receive":  t.TotalDroppedOnReceive,
		"metrics":          t.TotalMetrics,
	})
	fmt.Println(string(out))
}
