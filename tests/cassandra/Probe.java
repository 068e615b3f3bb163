// Readiness probe for cluster.sh: waits until every given node answers CQL and its
// system.peers lists every other given node, then exits 0 (1 on timeout). It uses the
// Java driver that ships with cassandra-all, so the cluster needs nothing but its own jars.
//
//   java -cp 'lib/*' Probe <timeout-seconds> <address>...
import com.datastax.driver.core.Cluster;
import com.datastax.driver.core.Row;
import com.datastax.driver.core.Session;
import com.datastax.driver.core.policies.RoundRobinPolicy;
import com.datastax.driver.core.policies.WhiteListPolicy;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;

public class Probe {
    public static void main(String[] args) throws Exception {
        long deadline = System.nanoTime() + Long.parseLong(args[0]) * 1_000_000_000L;
        List<String> nodes = new ArrayList<>();
        for (int i = 1; i < args.length; i++) nodes.add(args[i]);
        for (String node : nodes) {
            String last = "";
            while (true) {
                try {
                    Set<String> missing = missingPeers(node, nodes);
                    if (missing.isEmpty()) break;
                    last = node + ": system.peers lacks " + missing;
                } catch (Exception e) {
                    last = node + ": " + e;
                }
                if (System.nanoTime() > deadline) {
                    System.err.println("probe timed out; last: " + last);
                    System.exit(1);
                }
                Thread.sleep(250);
            }
        }
        // Do not wait for the driver's event loops to wind down.
        System.exit(0);
    }

    /** The other nodes that the node at `address` does not list in system.peers yet. */
    static Set<String> missingPeers(String address, List<String> nodes) throws Exception {
        InetSocketAddress endpoint = new InetSocketAddress(InetAddress.getByName(address), 9042);
        try (Cluster cluster = Cluster.builder()
                .addContactPointsWithPorts(endpoint)
                .withLoadBalancingPolicy(new WhiteListPolicy(new RoundRobinPolicy(), Collections.singletonList(endpoint)))
                .withoutMetrics()
                .withoutJMXReporting()
                .build();
             Session session = cluster.connect()) {
            Set<String> missing = new TreeSet<>(nodes);
            missing.remove(address);
            for (Row row : session.execute("SELECT peer, rpc_address FROM system.peers")) {
                missing.remove(row.getInet("peer").getHostAddress());
            }
            return missing;
        }
    }
}
