"""Turns the shipped manifests (deploy/kubernetes: ConfigMap, Secret, Deployment) into the
nearest pod podman 4.3 can play, changing only what it cannot express or what this
machine needs, and prints each change (play_pod.sh shows them in the CI log):

podman 4.3 cannot express
  - a native sidecar (an init container with restartPolicy: Always): it runs init
    containers to completion before the others, so countersink becomes an ordinary first
    container; podman then stops both containers at once (no "sidecar after the
    application" order);
  - a ConfigMap mounted with subPath: it mounts the whole volume at the path, so the
    config directory is mounted at /etc/countersink/config and --config points into it;
  - httpGet probes: it turns them into healthchecks that run curl inside the container
    (the image has none) on systemd timers; they are dropped;
  - a Secret in the YAML: it reads Secret volumes from podman secrets (play_pod.sh
    creates it from the Secret, data base64-encoded), and crashes unless `optional` is
    set, so optional: false is written out;
  - replicas: one pod is played.
what this machine needs
  - host network (the store is a cqlsim on the host's loopback; no bridge networking
    here), hence no port mappings and no net.unix.max_dgram_qlen sysctl (a host sysctl
    under host network);
  - the ConfigMap's contact point, data centre, metrics and UDP addresses point at the
    host's cqlsim and free ports;
  - the application image is the app of tests/deploy/pod/app.rs.

Usage: podify.py MANIFEST_DIR OUT_PLAY_YAML OUT_SECRET_YAML CQL_ADDR METRICS_ADDR UDP_ADDR
       APP_IMAGE APP_INCREMENTS APP_METRIC
"""

import base64
import os
import sys

import yaml


def main():
    src, out_play, out_secret, cql, metrics, udp, app_image, increments, metric = sys.argv[1:]
    docs = []
    for name in ("configmap.yaml", "secret.yaml", "deployment.yaml"):
        with open(os.path.join(src, name)) as f:
            docs += [d for d in yaml.safe_load_all(f) if d]
    by_kind = {d["kind"]: d for d in docs}
    config_map, secret, deployment = by_kind["ConfigMap"], by_kind["Secret"], by_kind["Deployment"]

    def say(text):
        print(f"podify: {text}")

    toml = config_map["data"]["countersink.toml"]
    for old, new in (
        ('contact_points = ["cassandra.cassandra.svc.cluster.local:9042"]', f'contact_points = ["{cql}"]'),
        ('local_dc = "dc1"', 'local_dc = "datacenter1"'),
        ('listen = "0.0.0.0:9102"', f'listen = "{metrics}"'),
        ('listen = "127.0.0.1:8125"', f'listen = "{udp}"'),
    ):
        if old not in toml:
            sys.exit(f"podify: the ConfigMap no longer has {old!r}: update podify.py")
        toml = toml.replace(old, new)
    config_map["data"]["countersink.toml"] = toml
    say(f"ConfigMap: store {cql} (datacenter1), metrics {metrics}, UDP {udp}")

    secret["data"] = {k: base64.b64encode(v.encode()).decode() for k, v in secret.pop("stringData").items()}
    with open(out_secret, "w") as f:
        yaml.safe_dump(secret, f)
    say(f"Secret {secret['metadata']['name']}: given to `podman secret create` (podman 4.3 reads Secret volumes from podman secrets)")

    deployment["spec"]["replicas"] = 1
    say("Deployment: replicas 1")
    pod = deployment["spec"]["template"]["spec"]
    sidecar = [c for c in pod.pop("initContainers") if c["name"] == "countersink"][0]
    if sidecar.pop("restartPolicy") != "Always":
        sys.exit("podify: the sidecar is no longer a native sidecar: update podify.py")
    say("countersink: native sidecar (init container, restartPolicy Always) played as an ordinary first container")
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        sidecar.pop(probe)
    say("countersink: httpGet probes dropped (podman runs them as curl healthchecks in the container); play_pod.sh polls /readyz itself")
    sidecar.pop("ports")
    say("countersink: containerPort dropped (no port mappings under host network)")
    config_mount = [m for m in sidecar["volumeMounts"] if m["name"] == "countersink-config"][0]
    if config_mount.pop("subPath") != "countersink.toml" or sidecar["args"][-1] != config_mount["mountPath"]:
        sys.exit("podify: the config mount changed: update podify.py")
    config_mount["mountPath"] = "/etc/countersink/config"
    sidecar["args"][-1] = "/etc/countersink/config/countersink.toml"
    say("countersink: ConfigMap mounted as a directory at /etc/countersink/config (podman 4.3 ignores subPath)")
    sysctls = pod["securityContext"].pop("sysctls")
    say(f"pod: sysctls {[s['name'] for s in sysctls]} dropped (host network: they would be the host's)")
    for volume in pod["volumes"]:
        if "secret" in volume:
            volume["secret"]["optional"] = False
    app = pod["containers"][0]
    app["image"] = app_image
    app.setdefault("env", []).extend([{"name": "APP_INCREMENTS", "value": increments},
                                      {"name": "APP_METRIC", "value": metric}])
    say(f"app: image {app_image}, {increments} increments of {metric} to {[e['value'] for e in app['env'] if e['name'] == 'DD_DOGSTATSD_URL'][0]}")
    pod["containers"] = [sidecar, app]
    with open(out_play, "w") as f:
        yaml.safe_dump_all([config_map, deployment], f, sort_keys=False)


if __name__ == "__main__":
    main()
