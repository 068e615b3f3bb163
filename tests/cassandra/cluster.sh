#!/usr/bin/env bash
# A real Apache Cassandra cluster on this machine, for tests and benchmarks.
#
#   cluster.sh up [N]       start N nodes (default 1) on fresh data, one after another; each on
#                           127.0.0.K with CQL on 9042 and storage on 7000. Returns when every
#                           node answers CQL and lists every other node in system.peers.
#   cluster.sh down         stop every node by pid (SIGTERM, SIGKILL after 30 s); data is kept
#                           until the next `up`.
#   cluster.sh status       one line per node, then `contact points: 127.0.0.1:9042,...`
#   cluster.sh contact      only the contact points, comma-separated (for scripts)
#   cluster.sh start K      start node K again on its existing data (after `kill K`) and wait
#   cluster.sh stop K       stop node K cleanly (SIGTERM, as `down` does for every node)
#   cluster.sh kill K       SIGKILL node K (a crash)
#   cluster.sh pause K      SIGSTOP node K (a frozen replica); `resume K` sends SIGCONT
#   cluster.sh pid K        node K's process id
#   cluster.sh fetch        only download the jars (the first `up` does it too)
#
# The jars come from Maven Central once (pom.xml beside this file pins cassandra-all) into
# $CASSANDRA_HOME_DIR/lib; later runs do not call Maven at all. Everything lives under
# $CASSANDRA_HOME_DIR (default: the repository's target/cassandra).
#
# Environment (read by `up`, which writes each node's cassandra.yaml; `start` reuses that yaml
# and reads only CASSANDRA_HEAP, CASSANDRA_START_TIMEOUT and CASSANDRA_JVM_EXTRA):
#   CASSANDRA_HEAP                      heap per node (default 768M)
#   CASSANDRA_WRITE_TIMEOUT             write_request_timeout (default 2000ms)
#   CASSANDRA_COUNTER_WRITE_TIMEOUT     counter_write_request_timeout (default 5000ms)
#   CASSANDRA_READ_TIMEOUT              read_request_timeout (default 5000ms)
#   CASSANDRA_COMMITLOG_SYNC            commitlog_sync: periodic (Cassandra's default: fsync every
#                                       10 s, so a killed node loses up to 10 s of writes) or batch
#                                       (fsync before acknowledging)
#   CASSANDRA_START_TIMEOUT             seconds to wait for one node (default 240)
#   CASSANDRA_JVM_EXTRA                 more JVM options, space-separated
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
home="${CASSANDRA_HOME_DIR:-$root/target/cassandra}"
lib="$home/lib"
heap="${CASSANDRA_HEAP:-768M}"
start_timeout="${CASSANDRA_START_TIMEOUT:-240}"

die() { echo "cluster.sh: $*" >&2; exit 1; }
log() { echo "cluster.sh: $*" >&2; }
now_ms() { date +%s%3N; }

address() { echo "127.0.0.$1"; }
node_dir() { echo "$home/node$1"; }
# Nodes that have a directory, in order (the cluster's size is fixed by `up`).
nodes() {
    local k
    for k in $(seq 1 9); do [ -d "$(node_dir "$k")" ] && echo "$k"; done
    return 0
}
pid_of() { cat "$(node_dir "$1")/pid" 2>/dev/null || true; }
alive() { local pid; pid="$(pid_of "$1")"; [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; }
cql_open() { (exec 3<>"/dev/tcp/$(address "$1")/9042") 2>/dev/null; }

# Download cassandra-all and its runtime dependencies once; a stamp with the pom's hash makes
# later runs skip Maven (and so run offline).
fetch_jars() {
    local stamp="$lib/.pom.sha256" want
    want="$(sha256sum "$here/pom.xml" | cut -d' ' -f1)"
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then return 0; fi
    command -v mvn >/dev/null || die "Maven (mvn) is not installed"
    log "fetching cassandra-all and its dependencies from Maven Central into $lib"
    rm -rf "$lib"
    mkdir -p "$lib"
    mvn -B -q -Dstyle.color=never -f "$here/pom.xml" -Dmaven.repo.local="$home/m2" \
        dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$lib" \
        || die "Maven could not resolve the jars (see above)"
    echo "$want" >"$stamp"
}

# The readiness probe, compiled once against the driver that ships with cassandra-all.
probe() {
    local classes="$home/probe"
    if [ ! -f "$classes/Probe.class" ] || [ "$here/Probe.java" -nt "$classes/Probe.class" ]; then
        mkdir -p "$classes"
        javac -nowarn -cp "$lib/*" -d "$classes" "$here/Probe.java"
    fi
    java -Xmx128m "-Dlogback.configurationFile=file://$here/logback.xml" "-Dcassandra.logdir=$classes" \
        -cp "$classes:$lib/*" Probe "$@"
}

# Token K of N: evenly spaced over the Murmur3 ring, one token per node (num_tokens: 1), so
# a fresh cluster needs no token allocation and no bootstrap streaming.
token() {
    python3 -c "print(-2**63 + ($1 - 1) * (2**64 // $2))"
}

commitlog_sync() {
    case "${CASSANDRA_COMMITLOG_SYNC:-periodic}" in
        periodic) printf 'commitlog_sync: periodic\ncommitlog_sync_period: 10000ms' ;;
        batch) printf 'commitlog_sync: batch' ;;
        *) die "CASSANDRA_COMMITLOG_SYNC must be periodic or batch" ;;
    esac
}

write_yaml() {
    local k="$1" n="$2" dir
    dir="$(node_dir "$k")"
    mkdir -p "$dir/conf" "$dir/data" "$dir/commitlog" "$dir/saved_caches" "$dir/hints" "$dir/cdc_raw" "$dir/logs" "$dir/triggers"
    cat >"$dir/conf/cassandra.yaml" <<EOF
# Written by tests/cassandra/cluster.sh for node $k of $n. Every key not here keeps
# Cassandra 5.0's default.
cluster_name: countersink-test
num_tokens: 1
initial_token: $(token "$k" "$n")
partitioner: org.apache.cassandra.dht.Murmur3Partitioner
endpoint_snitch: SimpleSnitch
seed_provider:
  - class_name: org.apache.cassandra.locator.SimpleSeedProvider
    parameters:
      - seeds: "127.0.0.1:7000"
listen_address: $(address "$k")
rpc_address: $(address "$k")
storage_port: 7000
native_transport_port: 9042
start_native_transport: true
# A fresh cluster holds no data yet: nothing to stream, so a node joins at once.
auto_bootstrap: false
storage_compatibility_mode: NONE
data_file_directories:
  - $dir/data
commitlog_directory: $dir/commitlog
saved_caches_directory: $dir/saved_caches
hints_directory: $dir/hints
cdc_raw_directory: $dir/cdc_raw
$(commitlog_sync)
# Tests drop and truncate often; snapshots would only cost time and disk.
auto_snapshot: false
write_request_timeout: ${CASSANDRA_WRITE_TIMEOUT:-2000ms}
counter_write_request_timeout: ${CASSANDRA_COUNTER_WRITE_TIMEOUT:-5000ms}
read_request_timeout: ${CASSANDRA_READ_TIMEOUT:-5000ms}
EOF
}

# JVM options: the ones Cassandra 5.0's conf/jvm-server.options and conf/jvm17-server.options
# set for every server on Java 17 (assertions, G1, the JPMS exports and opens the daemon needs,
# Netty's allocator settings), plus what bin/cassandra and conf/cassandra-env.sh pass (config,
# storage and log directories, a local-only JMX port per node). AlwaysPreTouch is left out: it
# only makes a small test heap slower to start.
jvm_options() {
    local k="$1" dir
    dir="$(node_dir "$k")"
    local opts=(
        "-Xms$heap" "-Xmx$heap"
        -ea -da:net.openhft...
        -XX:+UseThreadPriorities -Xss256k -XX:+UseTLAB -XX:+ResizeTLAB
        -XX:+PerfDisableSharedMem -Djava.net.preferIPv4Stack=true
        -XX:+ExitOnOutOfMemoryError
        -XX:+UseG1GC -XX:+ParallelRefProcEnabled -XX:MaxTenuringThreshold=1
        -XX:G1RSetUpdatingPauseTimePercent=5 -XX:MaxGCPauseMillis=300
        -XX:InitiatingHeapOccupancyPercent=70
        -Djdk.attach.allowAttachSelf=true
        --add-exports java.base/jdk.internal.misc=ALL-UNNAMED
        --add-exports java.management.rmi/com.sun.jmx.remote.internal.rmi=ALL-UNNAMED
        --add-exports java.rmi/sun.rmi.registry=ALL-UNNAMED
        --add-exports java.rmi/sun.rmi.server=ALL-UNNAMED
        --add-exports java.sql/java.sql=ALL-UNNAMED
        --add-exports java.base/java.lang.ref=ALL-UNNAMED
        --add-exports jdk.unsupported/sun.misc=ALL-UNNAMED
        --add-exports jdk.compiler/com.sun.tools.javac.file=ALL-UNNAMED
        --add-exports jdk.attach/sun.tools.attach=ALL-UNNAMED
        --add-opens java.base/java.lang.module=ALL-UNNAMED
        --add-opens java.base/jdk.internal.loader=ALL-UNNAMED
        --add-opens java.base/jdk.internal.ref=ALL-UNNAMED
        --add-opens java.base/jdk.internal.reflect=ALL-UNNAMED
        --add-opens java.base/jdk.internal.math=ALL-UNNAMED
        --add-opens java.base/jdk.internal.module=ALL-UNNAMED
        --add-opens java.base/jdk.internal.util.jar=ALL-UNNAMED
        --add-opens jdk.management/com.sun.management.internal=ALL-UNNAMED
        --add-opens java.base/sun.nio.ch=ALL-UNNAMED
        --add-opens java.base/java.io=ALL-UNNAMED
        --add-opens java.base/java.lang.reflect=ALL-UNNAMED
        --add-opens jdk.compiler/com.sun.tools.javac=ALL-UNNAMED
        --add-opens java.base/java.lang=ALL-UNNAMED
        --add-opens java.base/java.util=ALL-UNNAMED
        -Dio.netty.tryReflectionSetAccessible=true
        -Dio.netty.allocator.useCacheForAllThreads=true
        -Dio.netty.allocator.maxOrder=11
        -Dcassandra-foreground=yes
        "-Dcassandra.config=file://$dir/conf/cassandra.yaml"
        "-Dcassandra.storagedir=$dir"
        "-Dcassandra.logdir=$dir/logs"
        "-Dcassandra.triggers_dir=$dir/triggers"
        "-Dlogback.configurationFile=file://$here/logback.xml"
        "-Dcassandra.jmx.local.port=$((7199 + 100 * (k - 1)))"
        # Test-cluster start-up: on loopback, gossip converges in milliseconds; waiting for
        # it to "settle" (and the 30 s ring delay meant for real networks) only costs time.
        -Dcassandra.skip_wait_for_gossip_to_settle=0
        -Dcassandra.ring_delay_ms=1000
    )
    # shellcheck disable=SC2206
    [ -n "${CASSANDRA_JVM_EXTRA:-}" ] && opts+=(${CASSANDRA_JVM_EXTRA})
    printf '%s\n' "${opts[@]}"
}

# Start node K on its existing directory and wait until it listens for CQL.
start_node() {
    local k="$1" dir started
    dir="$(node_dir "$k")"
    [ -f "$dir/conf/cassandra.yaml" ] || die "node $k has no configuration (run up first)"
    alive "$k" && die "node $k is already running (pid $(pid_of "$k"))"
    local opts=()
    mapfile -t opts < <(jvm_options "$k")
    started="$(now_ms)"
    : >"$dir/logs/system.log"
    setsid java "${opts[@]}" -cp "$lib/*" org.apache.cassandra.service.CassandraDaemon \
        >"$dir/logs/stdout.log" 2>&1 </dev/null &
    echo $! >"$dir/pid"
    local deadline=$((SECONDS + start_timeout))
    until cql_open "$k" && grep -q "Startup complete" "$dir/logs/system.log" 2>/dev/null; do
        if ! alive "$k"; then
            tail -n 40 "$dir/logs/system.log" "$dir/logs/stdout.log" >&2 || true
            die "node $k exited during start-up (logs in $dir/logs)"
        fi
        if [ "$SECONDS" -ge "$deadline" ]; then
            tail -n 40 "$dir/logs/system.log" >&2 || true
            die "node $k did not answer CQL within ${start_timeout}s"
        fi
        sleep 0.2
    done
    log "node $k ($(address "$k"), pid $(pid_of "$k")) answers CQL after $(( $(now_ms) - started )) ms"
}

# Wait until every running node lists every other one in system.peers.
wait_for_peers() {
    local addresses=() k started
    for k in $(nodes); do alive "$k" && addresses+=("$(address "$k")"); done
    started="$(now_ms)"
    probe "$start_timeout" "${addresses[@]}" || die "system.peers did not converge"
    log "system.peers complete on ${#addresses[@]} node(s) after $(( $(now_ms) - started )) ms"
}

stop_node() {
    local k="$1" pid
    pid="$(pid_of "$k")"
    [ -n "$pid" ] || return 0
    if kill -0 "$pid" 2>/dev/null; then
        kill -CONT "$pid" 2>/dev/null || true
        kill -TERM "$pid" 2>/dev/null || true
        local waited=0
        while kill -0 "$pid" 2>/dev/null && [ "$waited" -lt 300 ]; do sleep 0.1; waited=$((waited + 1)); done
        if kill -0 "$pid" 2>/dev/null; then
            log "node $k (pid $pid) ignored SIGTERM for 30 s: SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
        fi
    fi
    rm -f "$(node_dir "$k")/pid"
}

contact_points() {
    local points=() k
    for k in $(nodes); do alive "$k" && points+=("$(address "$k"):9042"); done
    local IFS=,
    echo "${points[*]}"
}

up() {
    local n="${1:-1}" k started
    [[ "$n" =~ ^[1-9]$ ]] || die "up takes a node count from 1 to 9, not '$n'"
    for k in $(nodes); do alive "$k" && die "node $k is running: run '$0 down' first"; done
    command -v java >/dev/null || die "java (17) is not installed"
    commitlog_sync >/dev/null
    fetch_jars
    started="$(now_ms)"
    rm -rf "$home"/node[0-9]
    for k in $(seq 1 "$n"); do write_yaml "$k" "$n"; done
    for k in $(seq 1 "$n"); do start_node "$k"; done
    wait_for_peers
    log "cluster of $n node(s) up in $(( $(now_ms) - started )) ms"
    echo "contact points: $(contact_points)"
}

status() {
    local k any=0
    for k in $(nodes); do
        any=1
        if alive "$k"; then
            local state="running"
            [ "$(awk '{print $3}' "/proc/$(pid_of "$k")/stat" 2>/dev/null)" = T ] && state="paused"
            local cql="no CQL"; cql_open "$k" && cql="CQL open"
            echo "node $k $(address "$k"):9042 pid $(pid_of "$k") $state, $cql"
        else
            echo "node $k $(address "$k"):9042 stopped"
        fi
    done
    [ "$any" = 1 ] || echo "no cluster (run '$0 up [N]')"
    echo "contact points: $(contact_points)"
}

node_arg() {
    [[ "${1:-}" =~ ^[1-9]$ ]] && [ -d "$(node_dir "$1")" ] || die "no node '${1:-}'"
}

case "${1:-}" in
    up) up "${2:-1}" ;;
    down) for k in $(nodes); do stop_node "$k"; done ;;
    status) status ;;
    contact) contact_points ;;
    fetch) fetch_jars ;;
    start) node_arg "${2:-}"; start_node "$2"; wait_for_peers ;;
    stop) node_arg "${2:-}"; stop_node "$2" ;;
    kill) node_arg "${2:-}"; kill -KILL "$(pid_of "$2")"; rm -f "$(node_dir "$2")/pid" ;;
    pause) node_arg "${2:-}"; kill -STOP "$(pid_of "$2")" ;;
    resume) node_arg "${2:-}"; kill -CONT "$(pid_of "$2")" ;;
    pid) node_arg "${2:-}"; pid_of "$2" ;;
    *) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
esac
