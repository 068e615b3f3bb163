"""A real Prometheus server scraping a running `countersink dev`, with the rules of
deploy/prometheus loaded; checked through Prometheus's HTTP API:

- the series of the book's metrics catalogue (docs/src/reference/metrics.md) arrive with the values the traffic implies
  (lines per transport, invalid and ignored lines, drops, writes, flushes);
- the accounting identity holds per granularity, and equals what was sent;
- the recording rules evaluate (the identity gap is 0, rates are positive) and every
  rule is healthy;
- every query of the Grafana dashboard (deploy/grafana) parses and returns data, and its
  template variables find the instance.

Usage: python3 tests/deploy/prometheus_live.py   (PROMETHEUS, COUNTERSINK_BIN optional)
Fails (exit 1) when Prometheus is missing: CI installs it (.ci/run).
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "harness"))
from countersink_dev import DevServer, find_binary, free_port, utc_day  # noqa: E402

RULES = os.path.join(ROOT, "deploy", "prometheus", "countersink.rules.yml")
DASHBOARD = os.path.join(ROOT, "deploy", "grafana", "countersink.json")

passed = 0
failed = 0


def check(ok, what):
    global passed, failed
    if ok:
        passed += 1
        print(f"ok   {what}")
    else:
        failed += 1
        print(f"FAIL {what}")


class Prometheus:
    def __init__(self, binary, workdir, target):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = os.path.join(workdir, "prometheus.yml")
        with open(config, "w") as f:
            f.write(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                f"rule_files:\n  - {RULES}\n"
                "scrape_configs:\n  - job_name: countersink\n"
                f"    static_configs:\n      - targets: ['{target}']\n"
            )
        self.log = open(os.path.join(workdir, "prometheus.log"), "w")
        self.process = subprocess.Popen(
            [binary, f"--config.file={config}", f"--storage.tsdb.path={workdir}/tsdb",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )

    def api(self, path, **params):
        query = urllib.parse.urlencode(params, doseq=True)
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=10) as r:
            body = json.load(r)
        if body.get("status") != "success":
            raise RuntimeError(f"{path} {params}: {body}")
        return body["data"]

    def query(self, expr):
        """An instant query: [(labels, float value)]."""
        try:
            data = self.api("query", query=expr)
        except urllib.error.HTTPError as e:
            raise RuntimeError(f"query {expr!r}: HTTP {e.code}: {e.read().decode()}") from None
        if data["resultType"] == "scalar":
            return [({}, float(data["result"][1]))]
        return [(s["metric"], float(s["value"][1])) for s in data["result"]]

    def one(self, expr):
        result = self.query(expr)
        if len(result) != 1:
            raise RuntimeError(f"{expr}: expected one series, got {result}")
        return result[0][1]

    def wait(self, what, predicate, timeout=30):
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            try:
                last = predicate()
                if last:
                    return last
            except (OSError, RuntimeError) as e:
                last = e
            time.sleep(0.5)
        raise RuntimeError(f"timed out waiting for {what}: {last}")

    def stop(self):
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()


def send(binary, flag, target, lines):
    subprocess.run([binary, "send", flag, target], input="\n".join(lines) + "\n", text=True,
                   check=True, capture_output=True, timeout=30)


def send_otlp_http(port, name, via, values):
    """One OTLP/HTTP JSON request: a delta monotonic sum `name` with one integer point per
    value, tagged `via`, at the current time."""
    now = str(time.time_ns())
    points = [{"attributes": [{"key": "via", "value": {"stringValue": via}}],
               "timeUnixNano": now, "asInt": str(v)} for v in values]
    body = {"resourceMetrics": [{"resource": {"attributes": []}, "scopeMetrics": [{
        "scope": {"name": "prometheus_live"},
        "metrics": [{"name": name, "sum": {
            "aggregationTemporality": 1, "isMonotonic": True, "dataPoints": points}}]}]}]}
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/metrics", data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(request, timeout=10) as r:
        answer = json.load(r)
    if (answer.get("partialSuccess") or {}).get("rejectedDataPoints"):
        raise RuntimeError(f"OTLP/HTTP refused points: {answer}")


def dashboard_queries():
    """(panel title, refId, expr) of every panel target, and the template variables."""
    with open(DASHBOARD) as f:
        board = json.load(f)
    panels = []

    def walk(items):
        for p in items:
            panels.append(p)
            walk(p.get("panels", []))

    walk(board["panels"])
    queries = [(p["title"], t.get("refId"), t["expr"]) for p in panels for t in p.get("targets", [])]
    variables = board.get("templating", {}).get("list", [])
    return panels, queries, variables


def grafana_to_promql(expr, instance_regex):
    """Grafana's built-in variables as a dashboard would render them over a short range."""
    return (expr.replace("$__rate_interval", "1m").replace("${__rate_interval}", "1m")
            .replace("$__range", "1h").replace("${__range}", "1h")
            .replace("${instance:regex}", instance_regex).replace("$instance", instance_regex)
            .replace("${job:regex}", "countersink").replace("$job", "countersink"))


def main():
    prometheus_binary = os.environ.get("PROMETHEUS") or shutil.which("prometheus")
    if not prometheus_binary:
        print("FAIL prometheus is not installed (Debian package `prometheus`; .ci/run installs it)")
        print("prometheus_live: 0 passed, 1 failed")
        return 1
    binary = find_binary(ROOT)
    work = tempfile.mkdtemp(prefix="countersink-prom-")
    dev = DevServer(binary, work, flush_interval="1s")
    prometheus = None
    try:
        with dev:
            prometheus = Prometheus(prometheus_binary, work, dev.metrics_addr)
            prometheus.wait("the countersink target to be up",
                            lambda: prometheus.query('up{job="countersink"} == 1'))
            day = utc_day()
            # Known traffic on every transport but OTLP/gRPC (its traffic is the integration
            # test's and the Python SDK's); sums 3*40 + 5*30 + 7*20 + 11*10 + 13*5 = 585 per table.
            send(binary, "--udp", f"127.0.0.1:{dev.udp_port}", ["deploy.check:3|c|#via:udp"] * 40)
            send(binary, "--uds", dev.uds, ["deploy.check:5|c|#via:uds"] * 30)
            send(binary, "--uds-stream", dev.uds_stream, ["deploy.check:7|c|#via:uds_stream"] * 20)
            send(binary, "--tcp", f"127.0.0.1:{dev.tcp_port}", ["deploy.check:11|c|#via:tcp"] * 10)
            send_otlp_http(dev.otlp_http_port, "deploy.check", "otlp_http", [13] * 5)
            # Lines that are counted but not aggregated: invalid, another type, out of window.
            send(binary, "--udp", f"127.0.0.1:{dev.udp_port}",
                 ["deploy.bad:x|c", "deploy.gauge:1|g", "deploy.old:1|c|T1000000000"])
            expected_sum = 3 * 40 + 5 * 30 + 7 * 20 + 11 * 10 + 13 * 5
            dev.wait_settled(expected_sum + 1)
            target = '{job="countersink"}'

            def scraped_settled():
                want = {("accepted", expected_sum + 1), ("applied", expected_sum)}
                return all(
                    {(m["stage"], v) for m, v in prometheus.query(
                        f'countersink_stage_delta{{job="countersink",granularity="{g}",stage=~"accepted|applied"}}')} == want
                    for g in ("minute", "day"))

            prometheus.wait("Prometheus to scrape the settled identity", scraped_settled)
            # rate() over [5m] needs two samples after the traffic: wait for them.
            prometheus.wait("the recording rule of ingest rates",
                            lambda: len([v for _, v in prometheus.query("countersink:lines_received:rate5m") if v > 0]) == 5)

            # The series and their values.
            for transport, lines in (("udp", 43), ("uds", 30), ("uds_stream", 20), ("tcp", 10), ("otlp_http", 5)):
                check(prometheus.one(f'countersink_lines_received_total{{job="countersink",transport="{transport}"}}') == lines,
                      f"countersink_lines_received_total{{transport={transport}}} = {lines}")
            check(prometheus.one(f'countersink_lines_invalid_total{{job="countersink",reason="bad_value"}}') == 1,
                  "countersink_lines_invalid_total{reason=bad_value} = 1")
            check(prometheus.one(f'countersink_lines_ignored_total{{job="countersink",type="gauge"}}') == 1,
                  "countersink_lines_ignored_total{type=gauge} = 1")
            check(prometheus.one(f'countersink_dropped_total{{job="countersink",reason="timestamp_window"}}') == 1,
                  "countersink_dropped_total{reason=timestamp_window} = 1")
            check(prometheus.one(f"countersink_increments_accepted_total{target}") == 40 + 30 + 20 + 10 + 5 + 1,
                  "countersink_increments_accepted_total = 106 (the out-of-window line is accepted, then dropped)")
            check(prometheus.one(f'sum(countersink_cql_writes_total{{job="countersink",outcome!="applied"}})') == 0,
                  "no write re-queued, rejected or unknown")
            check(prometheus.one(f'sum(countersink_cql_writes_total{{job="countersink",outcome="applied"}})') >= 2,
                  "writes applied to the minute and the day table")
            check(prometheus.one(f"countersink_flushes_total{target}") >= 1, "flushes counted")
            check(prometheus.one(f"countersink_flush_duration_seconds_count{target}") >= 1, "flush duration histogram")
            check(prometheus.one(f'countersink_packets_received_total{{job="countersink",transport="uds_stream"}}') >= 1,
                  "countersink_packets_received_total{transport=uds_stream}")
            check(prometheus.one(f"countersink_previous_stop_unclean{target}") == 0, "previous stop clean (fresh state)")
            names = set(prometheus.api("label/__name__/values", **{"match[]": '{job="countersink"}'}))
            catalogue = open(os.path.join(ROOT, "docs", "src", "reference", "metrics.md")).read()
            histograms = {n.removesuffix("_bucket") for n in names if n.endswith("_bucket")}
            exported = {n for n in names if n.startswith("countersink_")
                        and not any(n in (h + "_bucket", h + "_sum", h + "_count") for h in histograms)} | histograms
            missing = sorted(n for n in exported if f"`{n}`" not in catalogue)
            check(len(exported) >= 20 and not missing, f"{len(exported)} countersink series in Prometheus, all in the metrics catalogue {missing}")

            # The identity, through Prometheus, per granularity. `dev`'s families have minute
            # and day tables only: their hour and total deltas settle as `no_table`.
            every_stage = {"accepted", "applied", "unknown", "rejected", "dropped", "spilled", "ledgered", "no_table", "pending"}
            for g in ("minute", "hour", "day", "total"):
                stages = {m["stage"]: v for m, v in prometheus.query(f'countersink_stage_delta{{job="countersink",granularity="{g}"}}')}
                settled = sum(v for s, v in stages.items() if s != "accepted")
                written, unwritten = ("applied", "no_table") if g in ("minute", "day") else ("no_table", "applied")
                check(set(stages) == every_stage and stages["accepted"] == settled == expected_sum + 1
                      and stages[written] == expected_sum and stages[unwritten] == 0 and stages["dropped"] == 1,
                      f"identity ({g}): accepted {stages.get('accepted')} = {written} {stages.get(written)} + dropped {stages.get('dropped')} + others; stages {sorted(stages.items())}")
            # Recording rules.
            gaps = prometheus.wait("the identity recording rule",
                                   lambda: prometheus.query("countersink:stage_delta:unaccounted"))
            check(sorted((m["granularity"], v) for m, v in gaps) == [("day", 0.0), ("hour", 0.0), ("minute", 0.0), ("total", 0.0)],
                  f"countersink:stage_delta:unaccounted = 0 for every granularity {gaps}")
            rates = {m["transport"]: v for m, v in prometheus.query("countersink:lines_received:rate5m")}
            # No traffic is sent over these here (their own tests cover them); their series
            # exist all the same.
            quiet = {"otlp_grpc", "http"}
            check(sorted(rates) == ["http", "otlp_grpc", "otlp_http", "tcp", "udp", "uds", "uds_stream"]
                  and all(v > 0 for t, v in rates.items() if t not in quiet),
                  f"countersink:lines_received:rate5m per transport, > 0 where traffic was sent {rates}")
            groups = prometheus.api("rules")["groups"]
            rules = [r for g in groups for r in g["rules"]]
            unhealthy = [(r["name"], r.get("lastError")) for r in rules if r.get("health") != "ok"]
            check(len(rules) >= 20 and not unhealthy, f"{len(rules)} rules loaded and healthy {unhealthy}")
            firing = [a["labels"]["alertname"] for a in prometheus.api("alerts")["alerts"] if a["state"] == "firing"]
            check(firing == [], f"no alert firing on a healthy sidecar {firing}")

            # Read back: both tables hold what was sent.
            for via, total in (("udp", 120), ("uds", 150), ("uds_stream", 140), ("tcp", 110), ("otlp_http", 65)):
                got = dev.get("deploy.check", [f"via:{via}"], [day, utc_day()])
                check(got == (total, total), f"deploy.check via {via}: day and minute tables {got} = {total}")

            # The dashboard: every query parses and returns data.
            panels, queries, variables = dashboard_queries()
            check(len(queries) >= 15, f"{len(queries)} dashboard queries")
            instance = dev.metrics_addr.replace(".", "\\\\.")
            for title, ref, expr in queries:
                promql = grafana_to_promql(expr, instance)
                try:
                    result = prometheus.query(promql)
                    numbers = [v for _, v in result if v == v]  # NaN != NaN
                    check(len(numbers) > 0, f"panel {title!r} {ref}: {len(result)} series, {len(numbers)} not NaN")
                except RuntimeError as e:
                    check(False, f"panel {title!r} {ref}: {e}")
            for variable in variables:
                if variable.get("type") != "query":
                    continue
                q = variable["query"]["query"] if isinstance(variable["query"], dict) else variable["query"]
                inner = q[len("label_values("):-1]
                metric, label = [x.strip() for x in inner.rsplit(",", 1)]
                values = prometheus.api(f"label/{label}/values", **{"match[]": grafana_to_promql(metric, instance)})
                check(dev.metrics_addr in values or "countersink" in values, f"variable {variable['name']}: {values}")
            code = dev.stop()
            check(code == 0, f"countersink dev stopped cleanly (exit {code})")
    except Exception as e:  # noqa: BLE001 - reported as a failure with the logs
        check(False, f"{type(e).__name__}: {e}")
        for name in ("countersink.err", "prometheus.log"):
            path = os.path.join(work, name)
            if os.path.exists(path):
                print(f"--- {name}")
                print("".join(open(path).readlines()[-20:]))
    finally:
        if prometheus:
            prometheus.stop()
        shutil.rmtree(work, ignore_errors=True)
    print(f"prometheus_live: {passed} passed, {failed} failed")
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main())
