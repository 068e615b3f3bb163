import com.timgroup.statsd.NonBlockingStatsDClientBuilder;
import com.timgroup.statsd.StatsDClient;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Sends COUNT increments (value i % 5 + 1, tag client:CASE) through java-dogstatsd-client:
 *
 * <pre>java -cp CLASSPATH Send OPTION TRANSPORT TARGET NAME CASE COUNT</pre>
 *
 * OPTION: "default" (as shipped: non-blocking, client-side aggregation, telemetry),
 * "blocking" (blocking queue: stop() then drains it) or "blocking-no-aggregation". TRANSPORT: udp (TARGET
 * host:port), uds or uds_stream (a socket path). Prints one JSON line: the errors the
 * client reported.
 */
public final class Send {
    public static void main(String[] args) {
        if (args.length != 6) {
            System.err.println("usage: Send OPTION TRANSPORT TARGET NAME CASE COUNT");
            System.exit(2);
        }
        String option = args[0];
        String transport = args[1];
        String target = args[2];
        String name = args[3];
        String clientCase = args[4];
        int count = Integer.parseInt(args[5]);
        AtomicLong errors = new AtomicLong();
        NonBlockingStatsDClientBuilder builder = new NonBlockingStatsDClientBuilder()
                .errorHandler(e -> errors.incrementAndGet());
        switch (transport) {
            case "udp":
                builder.address("udp://" + target);
                break;
            case "uds":
                builder.address("unixgram://" + target);
                break;
            case "uds_stream":
                builder.address("unixstream://" + target);
                break;
            default:
                throw new IllegalArgumentException("transport " + transport);
        }
        switch (option) {
            case "default":
                break;
            case "blocking":
                builder.blocking(true);
                break;
            case "blocking-no-aggregation":
                builder.enableAggregation(false).blocking(true);
                break;
            default:
                throw new IllegalArgumentException("option " + option);
        }
        StatsDClient client = builder.build();
        String tag = "client:" + clientCase;
        for (int i = 0; i < count; i++) {
            client.count(name, i % 5 + 1, tag);
        }
        // stop() closes the client; only in blocking mode does it drain the queue first.
        client.stop();
        System.out.println("{\"dropped\": " + errors.get() + "}");
    }
}
