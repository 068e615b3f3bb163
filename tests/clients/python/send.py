"""Sends COUNT increments (value i % 5 + 1, tag client:CASE) through a Python client:

    send.py datadog|datadog-buffered|datadog-blocking|statsd|statsd-pipeline TRANSPORT TARGET NAME CASE COUNT

datadog-blocking sets socket_timeout (the client's Unix sockets are non-blocking by default).

TRANSPORT is udp or tcp (TARGET host:port), uds (a Unix datagram socket path) or uds_stream
(a Unix stream socket path). Prints one JSON line: what the client says it dropped.
"""

import json
import sys


def main():
    client, transport, target, name, case, count = sys.argv[1:7]
    count = int(count)
    stats = {}
    if client.startswith("datadog"):
        from datadog.dogstatsd import DogStatsd

        kwargs = {"disable_buffering": client != "datadog-buffered"}
        if client == "datadog-blocking":
            kwargs["socket_timeout"] = 5
        if transport == "udp":
            host, port = target.rsplit(":", 1)
            kwargs.update(host=host, port=int(port))
        elif transport == "uds":
            kwargs.update(socket_path="unixgram://" + target)
        else:
            kwargs.update(socket_path="unixstream://" + target)
        statsd = DogStatsd(**kwargs)
        for i in range(count):
            statsd.increment(name, i % 5 + 1, tags=[f"client:{case}"])
        statsd.flush()
        statsd.close_socket()
        stats = {
            "dropped": statsd.packets_dropped,
            "packets_sent": statsd.packets_sent,
            "bytes_dropped": statsd.bytes_dropped,
        }
    else:
        import statsd

        if transport == "udp":
            host, port = target.rsplit(":", 1)
            sc = statsd.StatsClient(host, int(port))
        elif transport == "tcp":
            host, port = target.rsplit(":", 1)
            sc = statsd.TCPStatsClient(host, int(port))
        elif transport == "uds_stream":
            # Newline-framed stream, not the DogStatsD length prefix.
            sc = statsd.UnixSocketStatsClient(target)
        else:
            raise SystemExit("statsd has no Unix datagram client")
        if client == "statsd-pipeline":
            with sc.pipeline() as pipe:
                for i in range(count):
                    pipe.incr(name, i % 5 + 1)
        else:
            for i in range(count):
                sc.incr(name, i % 5 + 1)
        sc.close()
        stats = {"dropped": None}
    print(json.dumps(stats))


if __name__ == "__main__":
    main()
