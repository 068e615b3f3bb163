{{/*
Named templates. Each takes a context with .Values (this chart's values) and .Release:
inside this chart `.`; from another chart that has countersink as a dependency,
(dict "Values" .Values.countersink "Release" .Release). docs/src/operations/deployment.md, "Helm", shows a whole
Deployment of another chart with the sidecar added.
*/}}

{{- define "countersink.fullname" -}}
{{- default (printf "%s-countersink" .Release.Name) .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "countersink.image" -}}
{{- printf "%s:%s" .Values.image.repository (required "image.tag" .Values.image.tag) -}}
{{- end -}}

{{- define "countersink.secretName" -}}
{{- default (printf "%s-store" (include "countersink.fullname" .)) .Values.store.existingSecret -}}
{{- end -}}

{{- define "countersink.secretKey" -}}
{{- if .Values.store.existingSecret -}}{{ .Values.store.existingSecretKey }}{{- else -}}password{{- end -}}
{{- end -}}

{{- define "countersink.udsPath" -}}
{{- printf "%s/%s" .Values.ingest.socketDir .Values.ingest.uds.file -}}
{{- end -}}

{{- define "countersink.udsStreamPath" -}}
{{- printf "%s/%s" .Values.ingest.socketDir .Values.ingest.udsStream.file -}}
{{- end -}}

{{/* A config key the chart computes with: present, or the render fails naming it. */}}
{{- define "countersink.need" -}}
{{- $section := index .config .section | default dict -}}
{{- if not (hasKey $section .key) -}}
{{- fail (printf "config.%s.%s must be set: the chart sizes the pod from it" .section .key) -}}
{{- end -}}
{{- index $section .key | int64 -}}
{{- end -}}

{{/* The whole configuration as a dict: config, with the pod's keys set by the chart. */}}
{{- define "countersink.configDict" -}}
{{- $c := deepCopy (.Values.config | default dict) -}}
{{- $store := dict "contact_points" .Values.store.contactPoints "keyspace" .Values.store.keyspace "local_dc" .Values.store.localDc -}}
{{- if .Values.store.username -}}
{{- $_ := set $store "username" .Values.store.username -}}
{{- $_ := set $store "password_file" (printf "/etc/countersink/secret/%s" (include "countersink.secretKey" .)) -}}
{{- end -}}
{{- $_ := set $c "store" (mergeOverwrite (get $c "store" | default dict) $store) -}}
{{- $ingest := get $c "ingest" | default dict -}}
{{- $udp := get $ingest "udp" | default dict -}}
{{- $_ := set $udp "listen" (ternary .Values.ingest.udp.listen "off" .Values.ingest.udp.enabled) -}}
{{- $_ := set $ingest "udp" $udp -}}
{{- if .Values.ingest.uds.enabled -}}
{{- $_ := set $ingest "uds" (mergeOverwrite (get $ingest "uds" | default dict) (dict "path" (include "countersink.udsPath" .) "mode" (int64 .Values.ingest.socketMode))) -}}
{{- end -}}
{{- if .Values.ingest.udsStream.enabled -}}
{{- $_ := set $ingest "uds_stream" (mergeOverwrite (get $ingest "uds_stream" | default dict) (dict "path" (include "countersink.udsStreamPath" .) "mode" (int64 .Values.ingest.socketMode))) -}}
{{- end -}}
{{- $_ := set $c "ingest" $ingest -}}
{{- $_ := set $c "metrics" (mergeOverwrite (get $c "metrics" | default dict) (dict "listen" (printf "0.0.0.0:%d" (int64 .Values.metrics.port)))) -}}
{{- $_ := set $c "state" (mergeOverwrite (get $c "state" | default dict) (dict "dir" "/var/lib/countersink")) -}}
{{- toJson $c -}}
{{- end -}}

{{/* TOML from a dict: scalars first, then tables, then arrays of tables. */}}
{{- define "countersink.toml.key" -}}
{{- if regexMatch "^[A-Za-z0-9_-]+$" . -}}{{ . }}{{- else -}}{{ toJson . }}{{- end -}}
{{- end -}}

{{- define "countersink.toml.value" -}}
{{- $k := kindOf . -}}
{{- if eq $k "float64" -}}
{{- if eq (float64 (int64 .)) . -}}{{ int64 . }}{{- else -}}{{ . }}{{- end -}}
{{- else if or (eq $k "int") (eq $k "int64") (eq $k "bool") -}}{{ . }}
{{- else if eq $k "string" -}}{{ toJson . }}
{{- else if eq $k "slice" -}}[{{- range $i, $e := . -}}{{- if $i }}, {{ end -}}{{- include "countersink.toml.value" $e -}}{{- end -}}]
{{- else if eq $k "map" -}}{ {{- range $i, $key := keys . | sortAlpha -}}{{- if $i }},{{ end }} {{ include "countersink.toml.key" $key }} = {{ include "countersink.toml.value" (get $ $key) }}{{- end }} }
{{- else -}}{{ fail (printf "config value of kind %s cannot be written as TOML" $k) }}
{{- end -}}
{{- end -}}

{{- define "countersink.toml.isTableArray" -}}
{{- if and (eq (kindOf .) "slice") (gt (len .) 0) -}}{{- if eq (kindOf (first .)) "map" -}}true{{- end -}}{{- end -}}
{{- end -}}

{{- define "countersink.toml.table" -}}
{{- $table := .table -}}
{{- $prefix := .prefix -}}
{{- range $key := keys $table | sortAlpha -}}
{{- $v := get $table $key -}}
{{- if and (ne (kindOf $v) "map") (not (include "countersink.toml.isTableArray" $v)) }}
{{ include "countersink.toml.key" $key }} = {{ include "countersink.toml.value" $v }}
{{- end -}}
{{- end -}}
{{- range $key := keys $table | sortAlpha -}}
{{- $v := get $table $key -}}
{{- $name := printf "%s%s" $prefix (include "countersink.toml.key" $key) -}}
{{- if eq (kindOf $v) "map" }}

[{{ $name }}]
{{- include "countersink.toml.table" (dict "prefix" (printf "%s." $name) "table" $v) -}}
{{- else if include "countersink.toml.isTableArray" $v -}}
{{- range $item := $v }}

[[{{ $name }}]]
{{- include "countersink.toml.table" (dict "prefix" (printf "%s." $name) "table" $item) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "countersink.toml" -}}
{{- include "countersink.toml.table" (dict "prefix" "" "table" (include "countersink.configDict" . | fromJson)) | trim }}
{{ end -}}

{{/* Memory: 1.2 x (8 MiB + 5.5 x max_pending_bytes), rounded up to 16 MiB (docs/src/operations/deployment.md). */}}
{{- define "countersink.memory" -}}
{{- $pending := include "countersink.need" (dict "config" .Values.config "section" "limits" "key" "max_pending_bytes") | int64 -}}
{{- $peakMiB := addf 8 (mulf 5.5 (divf $pending 1048576)) -}}
{{- $mib := mulf 1.2 $peakMiB | ceil | int64 -}}
{{- printf "%dMi" (mul (div (add $mib 15) 16) 16) -}}
{{- end -}}

{{- define "countersink.resources" -}}
{{- if .Values.resources -}}
{{- toYaml .Values.resources -}}
{{- else -}}
{{- $memory := include "countersink.memory" . -}}
requests:
  cpu: 100m
  memory: {{ $memory }}
limits:
  memory: {{ $memory }}
{{- end -}}
{{- end -}}

{{/* The state volume's sizeLimit: the bound of `countersink state-size` plus 25 %. */}}
{{- define "countersink.stateSizeLimit" -}}
{{- if .Values.state.sizeLimit -}}
{{- .Values.state.sizeLimit -}}
{{- else -}}
{{- $c := .Values.config -}}
{{- $spill := include "countersink.need" (dict "config" $c "section" "state" "key" "max_spill_bytes") | int64 -}}
{{- $logBytes := include "countersink.need" (dict "config" $c "section" "state" "key" "max_log_bytes") | int64 -}}
{{- $logFiles := include "countersink.need" (dict "config" $c "section" "state" "key" "max_log_files") | int64 -}}
{{- $pending := include "countersink.need" (dict "config" $c "section" "limits" "key" "max_pending_bytes") | int64 -}}
{{- $total := add $spill (mul 2 (add $logFiles 1) $logBytes) (mul 4 1048576) (div $pending 2) 1048576 -}}
{{- $mib := mulf 1.25 (divf $total 1048576) | ceil | int64 -}}
{{- printf "%dMi" $mib -}}
{{- end -}}
{{- end -}}

{{/* Seconds in the config's duration text ("20s", "2m", "500ms"). */}}
{{- define "countersink.seconds" -}}
{{- $d := toString . -}}
{{- if hasSuffix "ms" $d -}}{{ divf (trimSuffix "ms" $d | float64) 1000 | ceil | int64 }}
{{- else if hasSuffix "s" $d -}}{{ trimSuffix "s" $d | int64 }}
{{- else if hasSuffix "m" $d -}}{{ mul (trimSuffix "m" $d | int64) 60 }}
{{- else -}}{{ fail (printf "duration %q: use ms, s or m" $d) }}{{- end -}}
{{- end -}}

{{/* terminationGracePeriodSeconds: the application's shutdown, then the final flush. */}}
{{- define "countersink.terminationGracePeriodSeconds" -}}
{{- $flush := (.Values.config.flush | default dict) -}}
{{- add (.Values.app.shutdownSeconds | int64) (include "countersink.seconds" (get $flush "shutdown_deadline" | default "20s") | int64) 5 -}}
{{- end -}}

{{/* Pod annotations for a Prometheus that discovers pods by annotation. */}}
{{- define "countersink.podAnnotations" -}}
{{- if .Values.metrics.annotations -}}
prometheus.io/scrape: "true"
prometheus.io/port: {{ .Values.metrics.port | int64 | quote }}
prometheus.io/path: /metrics
{{- end -}}
{{- end -}}

{{/* Fields of the pod's securityContext: the group of the sockets, the qlen sysctl. */}}
{{- define "countersink.podSecurityContext" -}}
fsGroup: 10001
seccompProfile:
  type: RuntimeDefault
{{- if and .Values.ingest.uds.enabled (gt (int64 .Values.ingest.maxDgramQlen) 0) }}
sysctls:
  - name: net.unix.max_dgram_qlen
    value: {{ .Values.ingest.maxDgramQlen | int64 | quote }}
{{- end }}
{{- end -}}

{{/* The sidecar: a native sidecar (init container, restartPolicy Always; Kubernetes
1.29+), started before the application and stopped after it. One list item. */}}
{{- define "countersink.sidecar" -}}
- name: countersink
  image: {{ include "countersink.image" . }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  restartPolicy: Always
  args: ["serve", "--config", "/etc/countersink/countersink.toml"]
  ports:
    - name: cs-metrics
      containerPort: {{ .Values.metrics.port | int64 }}
      protocol: TCP
  startupProbe:
    httpGet: {path: /healthz, port: cs-metrics}
    periodSeconds: {{ .Values.probes.startup.periodSeconds | int64 }}
    failureThreshold: {{ .Values.probes.startup.failureThreshold | int64 }}
  livenessProbe:
    httpGet: {path: /healthz, port: cs-metrics}
    periodSeconds: {{ .Values.probes.liveness.periodSeconds | int64 }}
    timeoutSeconds: {{ .Values.probes.liveness.timeoutSeconds | int64 }}
    failureThreshold: {{ .Values.probes.liveness.failureThreshold | int64 }}
  {{- if .Values.probes.readiness.enabled }}
  readinessProbe:
    httpGet: {path: /readyz, port: cs-metrics}
    periodSeconds: {{ .Values.probes.readiness.periodSeconds | int64 }}
    timeoutSeconds: {{ .Values.probes.readiness.timeoutSeconds | int64 }}
    failureThreshold: {{ .Values.probes.readiness.failureThreshold | int64 }}
  {{- end }}
  resources:
    {{- include "countersink.resources" . | nindent 4 }}
  securityContext:
    runAsNonRoot: true
    runAsUser: 10001
    runAsGroup: 10001
    allowPrivilegeEscalation: false
    readOnlyRootFilesystem: true
    capabilities:
      drop: ["ALL"]
  volumeMounts:
    - name: countersink-config
      mountPath: /etc/countersink/countersink.toml
      subPath: countersink.toml
      readOnly: true
    {{- if .Values.store.username }}
    - name: countersink-secret
      mountPath: /etc/countersink/secret
      readOnly: true
    {{- end }}
    - name: countersink-sockets
      mountPath: {{ .Values.ingest.socketDir }}
    - name: countersink-state
      mountPath: /var/lib/countersink
{{- end -}}

{{/* The pod's volumes for the sidecar. List items. */}}
{{- define "countersink.volumes" -}}
- name: countersink-config
  configMap:
    name: {{ include "countersink.fullname" . }}
{{- if .Values.store.username }}
- name: countersink-secret
  secret:
    secretName: {{ include "countersink.secretName" . }}
    defaultMode: 0440
{{- end }}
- name: countersink-sockets
  emptyDir:
    medium: Memory
    sizeLimit: 1Mi
- name: countersink-state
{{- if .Values.state.existingClaim }}
  persistentVolumeClaim:
    claimName: {{ .Values.state.existingClaim }}
{{- else }}
  emptyDir:
    sizeLimit: {{ include "countersink.stateSizeLimit" . }}
{{- end }}
{{- end -}}

{{/* The application container's mount of the socket directory. List items. */}}
{{- define "countersink.appVolumeMounts" -}}
- name: countersink-sockets
  mountPath: {{ .Values.ingest.socketDir }}
{{- end -}}

{{/* The application's environment: where DogStatsD clients send (datadog-go, datadog
Python, Java, hot-shots read DD_DOGSTATSD_URL). List items. */}}
{{- define "countersink.appEnv" -}}
- name: DD_DOGSTATSD_URL
{{- if .Values.ingest.uds.enabled }}
  value: unix://{{ include "countersink.udsPath" . }}
{{- else if .Values.ingest.udsStream.enabled }}
  value: unixstream://{{ include "countersink.udsStreamPath" . }}
{{- else }}
  value: udp://{{ .Values.ingest.udp.listen }}
{{- end }}
{{- end -}}
