"""Real HTTP clients against the durable increment API (`ingest.http.durable`) of
`countersink dev`: Python `requests` (urllib3's `Retry` on 429 and 503, POST included),
`httpx`, and `curl --retry`, each request with an `Idempotency-Key`. Every few requests is
sent a second time with its key, as a client does when it lost an answer: it must be
answered again (`Idempotent-Replayed: true`) and counted once. The totals read back by
`countersink get` must be exactly what was sent, in both tables; the ingest log must
have synced and be empty once flushed.

`python durable_http.py` with COUNTERSINK_BIN set; exits 1 on any failure.
"""

import json
import os
import subprocess
import sys
import tempfile
import uuid

import httpx
import requests
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
sys.path.insert(0, os.path.join(ROOT, "tests", "harness"))
from countersink_dev import DevServer, find_binary, free_port, utc_day  # noqa: E402

REQUESTS = 200
PER_REQUEST = 10


def items(client, n):
    return [{"name": f"durable.{client}", "tags": {"client": client}, "value": (n + i) % 5 + 1} for i in range(PER_REQUEST)]


def main():
    binary = os.environ.get("COUNTERSINK_BIN") or find_binary(ROOT)
    failures = []
    with tempfile.TemporaryDirectory() as work:
        port = free_port()
        config = os.path.join(work, "durable.toml")
        with open(config, "w") as f:
            f.write("[ingest.http]\ndurable = true\n")
        url = f"http://127.0.0.1:{port}/v1/increments"
        sent = {}
        replayed = {}
        with DevServer(binary, work, extra_args=("--config", config, "--http", f"127.0.0.1:{port}")) as dev:
            # requests, retrying 429 and 503 (POST is not retried by default: allowed_methods=None).
            session = requests.Session()
            retry = Retry(total=5, backoff_factor=0.1, status_forcelist=[429, 503], allowed_methods=None)
            session.mount("http://", HTTPAdapter(max_retries=retry))
            # httpx, retrying failed connections.
            hx = httpx.Client(transport=httpx.HTTPTransport(retries=3), timeout=30)
            for client in ("requests", "httpx", "curl"):
                sent[client] = 0
                replayed[client] = 0
                for n in range(REQUESTS if client != "curl" else 20):
                    body = items(client, n)
                    key = str(uuid.uuid4())
                    times = 2 if n % 7 == 0 else 1
                    for attempt in range(times):
                        status, again, answer = post(client, session, hx, url, key, body)
                        if status != 200:
                            failures.append(f"{client}: request {n} answered {status}: {answer}")
                            continue
                        if attempt == 0:
                            sent[client] += sum(i["value"] for i in body)
                            if again:
                                failures.append(f"{client}: a first request was answered as replayed")
                        elif again:
                            replayed[client] += 1
                        else:
                            failures.append(f"{client}: a retry with its key was not replayed")
            dev.wait_settled(sum(sent.values()))
            syncs = dev.value("countersink_ingest_log_syncs_total")
            log_bytes = dev.value("countersink_ingest_log_bytes")
            if syncs <= 0:
                failures.append(f"the ingest log never synced ({syncs})")
            if log_bytes != 0:
                failures.append(f"the ingest log holds {log_bytes} bytes after the flushes")
            day = utc_day()
            for client, total in sent.items():
                got = dev.get(f"durable.{client}", [f"client:{client}"], [day])
                if got != (total, total):
                    failures.append(f"{client}: sent {total}, the tables hold (day, minutes) {got}")
            code = dev.stop()
            if code != 0:
                failures.append(f"countersink dev exited {code}")
    print(json.dumps({"sent": sent, "replayed": replayed, "failures": failures}))
    for failure in failures:
        print("FAIL", failure, file=sys.stderr)
    print(f"durable_http: {len(failures)} failures")
    return 1 if failures else 0


def post(client, session, hx, url, key, body):
    """One POST with `key`: (status, replayed, answer)."""
    headers = {"Idempotency-Key": key, "Content-Type": "application/json"}
    if client == "requests":
        r = session.post(url, data=json.dumps(body), headers=headers, timeout=30)
        return r.status_code, r.headers.get("Idempotent-Replayed") == "true", r.text
    if client == "httpx":
        r = hx.post(url, content=json.dumps(body), headers=headers)
        return r.status_code, r.headers.get("idempotent-replayed") == "true", r.text
    out = subprocess.run(
        ["curl", "-sS", "-i", "--retry", "3", "--retry-all-errors", "-H", f"Idempotency-Key: {key}",
         "-H", "Content-Type: application/json", "--data-binary", json.dumps(body), url],
        capture_output=True, text=True, timeout=60,
    )
    head, _, text = out.stdout.partition("\r\n\r\n")
    status = int(head.split(" ", 2)[1]) if head.startswith("HTTP/") else 0
    return status, "idempotent-replayed: true" in head.lower(), text


if __name__ == "__main__":
    sys.exit(main())
