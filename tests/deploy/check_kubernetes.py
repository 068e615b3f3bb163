"""Checks deploy/kubernetes offline:

1. every manifest against the Kubernetes OpenAPI schemas, strictly (unknown fields are
   errors), for the oldest version with native sidecars (1.29) and the newest one the
   schema package ships; by the PyPI package kubernetes-validate, which embeds the
   schemas (nothing is fetched);
2. the ConfigMap's countersink.toml is a configuration countersink accepts
   (`countersink schema --config`, which parses and validates it);
3. the Deployment agrees with that configuration: socket paths inside the volume both
   containers mount, the metrics port the probes use, the state directory and the
   password file on mounted volumes, readiness on /readyz and liveness on /healthz, the
   grace period covering flush.shutdown_deadline, the memory limit covering the measured
   peak for limits.max_pending_bytes, the qlen sysctl.

Usage: check_kubernetes.py COUNTERSINK_BINARY   (run by check_kubernetes.sh)
       check_kubernetes.py COUNTERSINK_BINARY RENDERED.yaml...
The second form checks manifests rendered by the Helm chart (tests/deploy/check_helm.sh):
the same checks, for what the value set turns on (each socket configured, the Secret
when a password file is configured, the CronJob when rendered).
"""

import os
import json
import subprocess
import sys
import tempfile

import kubernetes_validate
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
K8S = os.path.join(ROOT, "deploy", "kubernetes")
VERSIONS = ("1.29.0", "1.37.0")

# Measured peak of the sidecar process (docs/src/operations/deployment.md, Kubernetes): idle RSS plus this factor
# times limits.max_pending_bytes while the pending buffer is full and a flush runs.
IDLE_BYTES = 8 * 2**20
PEAK_FACTOR = 5.5

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


def duration_seconds(text):
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    for unit in ("ms", "s", "m", "h"):
        if text.endswith(unit) and text[: -len(unit)].isdigit():
            return int(text[: -len(unit)]) * units[unit]
    raise ValueError(f"duration {text!r}")


def quantity_bytes(text):
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30}
    for unit, factor in units.items():
        if text.endswith(unit):
            return int(text[: -len(unit)]) * factor
    return int(text)


def under(path, mounts):
    return any(path == m or path.startswith(m.rstrip("/") + "/") for m in mounts)


def main():
    binary = sys.argv[1]
    rendered = sys.argv[2:]
    if rendered:
        sources = [(os.path.basename(p), p) for p in rendered]
    else:
        sources = [(f, os.path.join(K8S, f)) for f in sorted(os.listdir(K8S)) if f.endswith(".yaml")]
    documents = {}
    for name, path in sources:
        with open(path) as f:
            for doc in yaml.safe_load_all(f):
                if not doc:
                    continue
                documents[doc["kind"]] = doc
                for version in VERSIONS:
                    try:
                        kubernetes_validate.validate(doc, version, strict=True)
                        check(True, f"{name}: {doc['kind']} valid against Kubernetes {version} (strict)")
                    except kubernetes_validate.ValidationError as e:
                        check(False, f"{name}: {doc['kind']} against {version}: {e.message} at {list(e.path)}")
                    except kubernetes_validate.utils.SchemaNotFoundError as e:
                        check(False, f"{name}: no schema for {doc['kind']} in {version}: {e}")
    check({"ConfigMap", "Deployment"} <= set(documents) and (rendered or "Secret" in documents),
          f"manifests: {sorted(documents)}")

    toml_text = documents["ConfigMap"]["data"]["countersink.toml"]
    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
        f.write(toml_text)
    try:
        proc = subprocess.run([binary, "schema", "--config", f.name], capture_output=True, text=True)
        # The most the state directory can take with this configuration, as the binary
        # computes it (spill, outcome logs, journal): the volume must hold it.
        sizes = subprocess.run([binary, "state-size", "--config", f.name, "--json"],
                               capture_output=True, text=True)
    finally:
        os.unlink(f.name)
    check(proc.returncode == 0, f"countersink accepts the ConfigMap's countersink.toml {proc.stderr.strip()[-300:]}")
    check(sizes.returncode == 0, f"countersink state-size reads the ConfigMap's countersink.toml {sizes.stderr.strip()[-300:]}")
    state_size = json.loads(sizes.stdout)
    import tomllib

    config = tomllib.loads(toml_text)

    pod = documents["Deployment"]["spec"]["template"]["spec"]
    sidecars = [c for c in pod.get("initContainers", []) if c["name"] == "countersink"]
    check(len(sidecars) == 1 and sidecars[0].get("restartPolicy") == "Always",
          "countersink is a native sidecar (init container, restartPolicy Always)")
    sidecar = sidecars[0]
    app = pod["containers"][0]
    volumes = {v["name"]: v for v in pod["volumes"]}

    def mounts(container):
        return {m["mountPath"]: m["name"] for m in container.get("volumeMounts", [])}

    side_mounts, app_mounts = mounts(sidecar), mounts(app)
    sockets = [key for key in ("uds", "uds_stream") if config.get("ingest", {}).get(key, {}).get("path")]
    check(bool(sockets) or config.get("ingest", {}).get("udp", {}).get("listen", "127.0.0.1:8125") != "off",
          f"the application can reach the sidecar: {sockets or 'UDP'}")
    for key in sockets:
        path = config["ingest"][key]["path"]
        directory = os.path.dirname(path)
        shared = side_mounts.get(directory)
        check(shared is not None and app_mounts.get(directory) == shared and "emptyDir" in volumes[shared],
              f"ingest.{key}.path {path} is in an emptyDir both containers mount")
    config_mount = [m for m in sidecar["volumeMounts"] if m["name"] == "countersink-config"][0]
    check(sidecar["args"] == ["serve", "--config", config_mount["mountPath"]],
          f"the sidecar reads the mounted config {config_mount['mountPath']}")
    state_dir = config["state"]["dir"]
    check(under(state_dir, [p for p, v in side_mounts.items() if "emptyDir" in volumes[v] or "persistentVolumeClaim" in volumes[v]]),
          f"state.dir {state_dir} is on a writable volume")
    password = config["store"].get("password_file")
    if password or not rendered:
        secret_mounts = [p for p, v in side_mounts.items() if "secret" in volumes[v]]
        check(under(password or "", secret_mounts), f"store.password_file {password} is in the mounted Secret")
        secret_key = os.path.relpath(password, secret_mounts[0]) if secret_mounts else None
        secret_name = volumes[side_mounts[secret_mounts[0]]]["secret"]["secretName"] if secret_mounts else None
        if "Secret" in documents:
            check(documents["Secret"]["metadata"]["name"] == secret_name
                  and (secret_key in documents["Secret"].get("stringData", {}) or secret_key in documents["Secret"].get("data", {})),
                  f"the Secret {secret_name} has the key {secret_key}")
        else:
            print(f"note the Secret {secret_name} (key {secret_key}) is not rendered: an existing Secret")

    port = int(config["metrics"]["listen"].rsplit(":", 1)[1])
    host = config["metrics"]["listen"].rsplit(":", 1)[0]
    named = {p["name"]: p["containerPort"] for p in sidecar["ports"]}
    check(host in ("0.0.0.0", "[::]"), f"metrics.listen {host} is reachable by the kubelet and Prometheus")
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz"), ("startupProbe", "/healthz")):
        if probe == "readinessProbe" and rendered and probe not in sidecar:
            print("note no readiness probe (the value set turns it off)")
            continue
        get = sidecar[probe]["httpGet"]
        probe_port = named.get(get["port"], get["port"])
        check(get["path"] == path and probe_port == port, f"{probe} on {path} port {probe_port} (metrics {port})")
    annotations = documents["Deployment"]["spec"]["template"]["metadata"].get("annotations", {})
    check(annotations.get("prometheus.io/port") == str(port), "the scrape annotation names the metrics port")

    deadline = duration_seconds(config["flush"]["shutdown_deadline"])
    grace = pod["terminationGracePeriodSeconds"]
    check(grace >= deadline + 20, f"terminationGracePeriodSeconds {grace} >= shutdown_deadline {deadline} s + 20 s for the application and the exit")

    limit = quantity_bytes(sidecar["resources"]["limits"]["memory"])
    request = quantity_bytes(sidecar["resources"]["requests"]["memory"])
    pending = config["limits"]["max_pending_bytes"]
    peak = IDLE_BYTES + PEAK_FACTOR * pending
    check(limit >= 1.2 * peak and request == limit,
          f"memory limit {limit / 2**20:.0f} MiB >= 1.2 x measured peak {peak / 2**20:.0f} MiB for max_pending_bytes {pending / 2**20:.0f} MiB; request = limit")
    rows_bytes = config["limits"]["max_pending_rows"] * 153
    check(rows_bytes <= pending, f"max_pending_rows x 153 bytes ({rows_bytes / 2**20:.0f} MiB) within max_pending_bytes")
    state_volume = volumes[side_mounts[state_dir]].get("emptyDir")
    # Past its sizeLimit the kubelet evicts the pod, and the emptyDir (spill and unknown
    # log included) is gone: the configuration's bound must fit inside it. (A claim's size
    # is the claim's business.)
    if state_volume is None:
        print(f"note state.dir is on the claim {volumes[side_mounts[state_dir]]['persistentVolumeClaim']['claimName']}: no sizeLimit to check")
    size_limit = quantity_bytes(state_volume["sizeLimit"]) if state_volume else state_size["total"]
    check(state_volume is None or state_size["total"] <= size_limit,
          f"the state directory takes at most {state_size['total'] / 2**20:.0f} MiB (spill {state_size['spill'] / 2**20:.0f}, "
          f"logs {state_size['logs'] / 2**20:.0f}, journal {state_size['journal'] / 2**20:.0f}), within the volume's sizeLimit {(state_volume or {}).get('sizeLimit')}")
    sysctls = {s["name"]: s["value"] for s in pod["securityContext"].get("sysctls", [])}
    if "uds" in sockets:
        check(int(sysctls.get("net.unix.max_dgram_qlen", 0)) >= 512, "net.unix.max_dgram_qlen raised for the pod")
    for key in sockets:
        check(pod["securityContext"].get("fsGroup") is not None and config["ingest"][key]["mode"] == 0o660,
              f"ingest.{key}: socket mode 0660 with a pod fsGroup")
    app_env = {e["name"]: e.get("value") for e in app.get("env", [])}
    if "DD_DOGSTATSD_URL" in app_env:
        url = app_env["DD_DOGSTATSD_URL"]
        reachable = (url.startswith("unix://") and "uds" in sockets and url[7:] == config["ingest"]["uds"]["path"]) \
            or (url.startswith("unixstream://") and "uds_stream" in sockets and url[13:] == config["ingest"]["uds_stream"]["path"]) \
            or (url.startswith("udp://") and url[6:] == config["ingest"]["udp"]["listen"])
        check(reachable, f"the application's DD_DOGSTATSD_URL {url} is a socket the sidecar listens on")

    # The reconcile CronJob: the same config and Secret mounts, and arguments the binary
    # accepts (run with --help appended: clap parses every argument before it answers).
    if rendered and "CronJob" not in documents:
        print(f"check_kubernetes: {passed} passed, {failed} failed (no CronJob rendered)")
        return 1 if failed or not passed else 0
    check("CronJob" in documents, "the reconcile CronJob ships")
    job = documents["CronJob"]["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    reconcile = job["containers"][0]
    job_volumes = {v["name"]: v for v in job["volumes"]}
    job_mounts = mounts(reconcile)
    check(reconcile["args"][:3] == ["reconcile", "--config", config_mount["mountPath"]]
          and job_mounts.get(config_mount["mountPath"]) == "countersink-config"
          and job_volumes["countersink-config"]["configMap"]["name"] == documents["ConfigMap"]["metadata"]["name"],
          "the CronJob runs reconcile on the mounted ConfigMap")
    job_secret = [path for path, v in job_mounts.items() if "secret" in job_volumes[v]]
    if password:
        check(under(password, job_secret), f"the CronJob mounts the Secret holding {password}")
    check(job["restartPolicy"] == "Never" and documents["CronJob"]["spec"]["jobTemplate"]["spec"]["backoffLimit"] == 0,
          "a reconcile finding is not retried (restartPolicy Never, backoffLimit 0)")
    proc = subprocess.run([binary, *reconcile["args"], "--help"], capture_output=True, text=True)
    check(proc.returncode == 0, f"countersink parses the CronJob's arguments {proc.stderr.strip()[-300:]}")

    # The reconcile Indexed Job (the day in parts, merged afterwards): one part per
    # completion index, a part count dividing the day's slice count of the ConfigMap's
    # configuration, the CronJob's mounts, and arguments the binary accepts for index 0.
    if "Job" in documents:
        check_indexed_job(documents, binary, config, reconcile, job_volumes)
    elif not rendered:
        check(False, "the reconcile Indexed Job ships")

    print(f"check_kubernetes: {passed} passed, {failed} failed")
    return 1 if failed or not passed else 0


def day_slices(config):
    """The day's slice count countersink computes from a configuration (docs/src/operations/reconcile.md,
    "In parts"): exact.buckets, or with the key index on its gcd with key_index.buckets."""
    import math

    exact = config.get("exact", {}).get("buckets", 64)
    key_index = config.get("key_index", {})
    if not key_index.get("enabled", False):
        return exact
    return math.gcd(exact, key_index.get("buckets", 16))


def check_indexed_job(documents, binary, config, cron_container, cron_volumes):
    job = documents["Job"]["spec"]
    pod = job["template"]["spec"]
    container = pod["containers"][0]
    parts = job.get("completions")
    slices = day_slices(config)
    check(job.get("completionMode") == "Indexed" and parts and slices % parts == 0,
          f"the Indexed Job's {parts} completions divide the day's {slices} slices")
    check(0 < job.get("parallelism", 1) <= parts, f"parallelism {job.get('parallelism')} of {parts} parts")
    env = {e["name"]: e for e in container.get("env", [])}
    args = container["args"]
    slice_arg = args[args.index("--slice") + 1] if "--slice" in args else ""
    variable = slice_arg.split("/")[0][2:-1] if slice_arg.startswith("$(") else None
    field = env.get(variable, {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
    check(slice_arg == f"$({variable})/{parts}"
          and field == "metadata.annotations['batch.kubernetes.io/job-completion-index']",
          f"--slice {slice_arg}: the pod's completion index of {parts}")
    check("--format" in args and args[args.index("--format") + 1] == "json", "each part writes its JSON report")
    check("--repair" not in args and pod["restartPolicy"] == "Never", "parts only read (no --repair), restartPolicy Never")
    check(container.get("volumeMounts") == cron_container.get("volumeMounts")
          and {v["name"]: v for v in pod["volumes"]} == cron_volumes,
          "the Indexed Job mounts the CronJob's config and Secret")
    concrete = [a.replace(f"$({variable})", "0") for a in args]
    proc = subprocess.run([binary, *concrete, "--help"], capture_output=True, text=True)
    check(proc.returncode == 0, f"countersink parses the Indexed Job's arguments {proc.stderr.strip()[-300:]}")


if __name__ == "__main__":
    sys.exit(main())
