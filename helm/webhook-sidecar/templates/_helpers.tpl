{{/*
Named templates. Those marked PUBLIC are the sidecar-mode interface: an app chart that depends
on this chart includes them with the dependency's own context, .Subcharts.<name or alias>, e.g.

  {{- $sidecar := .Subcharts.webhookSidecar }}
  containers:
    - name: app …
    {{- include "webhook-sidecar.containers" $sidecar | nindent 8 }}
  volumes:
    {{- include "webhook-sidecar.volumes" $sidecar | nindent 8 }}

That context carries this chart's .Values, .Chart (the image tag defaults to its appVersion),
.Release and .Capabilities, so they render the same in this chart and in the parent.
*/}}

{{/* The context check: the named templates need .Chart and .Capabilities (Helm >= 3.7). */}}
{{- define "webhook-sidecar.requireContext" -}}
{{- if not (and .Chart .Capabilities) }}
{{- fail "webhook-sidecar's named templates need the dependency's context: include them with .Subcharts.<alias> (e.g. $sidecar := .Subcharts.webhookSidecar), not a dict of Values and Release" }}
{{- end }}
{{- end }}

{{- define "webhook-sidecar.name" -}}
{{- default "webhook-sidecar" .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "webhook-sidecar.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := include "webhook-sidecar.name" . }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "webhook-sidecar.selectorLabels" -}}
app.kubernetes.io/name: {{ include "webhook-sidecar.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "webhook-sidecar.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "webhook-sidecar.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* registry/repository[:tag|@digest]: global.imageRegistry wins over image.registry; the tag
defaults to this chart's appVersion. */}}
{{- define "webhook-sidecar.image" -}}
{{- include "webhook-sidecar.requireContext" . }}
{{- $registry := dig "imageRegistry" "" (.Values.global | default dict) | default .Values.image.registry | default "" }}
{{- $repository := .Values.image.repository }}
{{- if $registry }}
{{- $repository = printf "%s/%s" (trimSuffix "/" $registry) $repository }}
{{- end }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" $repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" $repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}
{{- end }}

{{/* The Secret holding the admin token, as JSON {name, key}; empty when there is none. */}}
{{- define "webhook-sidecar.adminTokenRef" -}}
{{- if .Values.adminToken.existingSecret.name }}
{{- dict "name" .Values.adminToken.existingSecret.name "key" .Values.adminToken.existingSecret.key | toJson }}
{{- else if .Values.adminToken.generate }}
{{- dict "name" (printf "%s-admin-token" (include "webhook-sidecar.fullname" .)) "key" "token" | toJson }}
{{- end }}
{{- end }}

{{/* The Secret holding the forward-signing secret, as JSON {name, key}; empty when off. */}}
{{- define "webhook-sidecar.forwardSigningRef" -}}
{{- if .Values.forwardSigning.enabled }}
{{- if .Values.forwardSigning.existingSecret.name }}
{{- dict "name" .Values.forwardSigning.existingSecret.name "key" .Values.forwardSigning.existingSecret.key | toJson }}
{{- else }}
{{- dict "name" (printf "%s-forward-signing" (include "webhook-sidecar.fullname" .)) "key" "secret" | toJson }}
{{- end }}
{{- end }}
{{- end }}

{{/* A generated Secret's base64 data value, kept across upgrades: the value the cluster holds
(lookup) when there is one, else the new value given. Args: (list $ctx name key new). */}}
{{- define "webhook-sidecar.keptSecretData" -}}
{{- $ctx := index . 0 }}{{ $name := index . 1 }}{{ $key := index . 2 }}{{ $new := index . 3 }}
{{- $existing := lookup "v1" "Secret" $ctx.Release.Namespace $name }}
{{- if and $existing (hasKey ($existing.data | default dict) $key) }}
{{- index $existing.data $key }}
{{- else }}
{{- $new | b64enc }}
{{- end }}
{{- end }}

{{/* The readiness endpoint: readinessPath, or by mode (sidecar: /healthz, standalone: /readyz). */}}
{{- define "webhook-sidecar.readinessPath" -}}
{{- if .Values.readinessPath }}
{{- .Values.readinessPath }}
{{- else if eq .Values.mode "sidecar" }}
{{- "/healthz" }}
{{- else }}
{{- "/readyz" }}
{{- end }}
{{- end }}

{{- define "webhook-sidecar.configDir" -}}/etc/webhook-sidecar/config{{- end }}
{{- define "webhook-sidecar.secretsDir" -}}/etc/webhook-sidecar/secrets{{- end }}

{{/* The store kind: server (PostgreSQL, MySQL or MariaDB: shared by replicas, migrated before
the proxy starts) when a URL comes from a Secret or names one of them, else sqlite. */}}
{{- define "webhook-sidecar.storeKind" -}}
{{- if or .Values.store.existingSecret.name (regexMatch "^(postgres|mysql://|mariadb://)" (.Values.store.url | default "")) -}}
server
{{- else -}}
sqlite
{{- end }}
{{- end }}

{{/* The top-level upstream URL. Standalone: standalone.upstreamUrl, which may stay empty only
when every provider names its own app (providers.<key>.upstream.url). */}}
{{- define "webhook-sidecar.upstreamUrl" -}}
{{- if eq .Values.mode "standalone" -}}
{{- $everyOwn := true }}
{{- range $key, $provider := .Values.providers }}
{{- if not (and (kindIs "map" $provider.upstream) $provider.upstream.url) }}{{ $everyOwn = false }}{{ end }}
{{- end }}
{{- if $everyOwn }}
{{- .Values.standalone.upstreamUrl }}
{{- else }}
{{- required "standalone.upstreamUrl is required in standalone mode (or an upstream.url for every provider)" .Values.standalone.upstreamUrl }}
{{- end }}
{{- else -}}
{{- printf "http://127.0.0.1:%d" (int .Values.sidecar.appPort) }}
{{- end }}
{{- end }}

{{/* The environment variable a provider's env-mode secret reference is passed in. */}}
{{- define "webhook-sidecar.secretEnvName" -}}
{{- $provider := index . 0 }}{{ $index := index . 1 -}}
{{- printf "WEBHOOK_SIDECAR_SECRET_%s_%d" ($provider | upper | replace "-" "_") (int $index) }}
{{- end }}

{{/* One volume per Secret mounted as files, named from a hash of the Secret's name. */}}
{{- define "webhook-sidecar.secretVolumeName" -}}
{{- printf "webhook-sidecar-s-%s" (sha256sum . | trunc 12) }}
{{- end }}

{{/* The Secret names whose keys are mounted as files (sorted, unique), as a JSON list. */}}
{{- define "webhook-sidecar.fileSecretNames" -}}
{{- $names := list }}
{{- range $key, $provider := .Values.providers }}
{{- range $ref := $provider.secrets | default list }}
{{- if and (kindIs "map" $ref) (hasKey $ref "secretKeyRef") (ne ($ref.as | default "file") "env") }}
{{- $names = append $names $ref.secretKeyRef.name }}
{{- end }}
{{- end }}
{{- end }}
{{- $names | uniq | sortAlpha | toJson }}
{{- end }}

{{/* The config file (YAML), rendered from values. */}}
{{- define "webhook-sidecar.configYaml" -}}
{{- $v := .Values }}
{{- $config := deepCopy ($v.config | default dict) }}
{{- $upstream := deepCopy (get $config "upstream" | default dict) }}
{{- with include "webhook-sidecar.upstreamUrl" . }}
{{- $_ := set $upstream "url" . }}
{{- end }}
{{- if include "webhook-sidecar.forwardSigningRef" . }}
{{- $_ := set $upstream "signing_secrets" (list "${WEBHOOK_SIDECAR_SIGNING_SECRET}") }}
{{- end }}
{{- $store := deepCopy (get $config "store" | default dict) }}
{{- if $v.store.existingSecret.name }}
{{- $_ := set $store "url" "${WEBHOOK_SIDECAR_STORE_URL}" }}
{{- else if $v.store.url }}
{{- $_ := set $store "url" $v.store.url }}
{{- else }}
{{- $_ := set $store "url" (printf "sqlite:///%s" $v.store.sqlitePath) }}
{{- end }}
{{- $providers := dict }}
{{- range $key, $provider := $v.providers }}
{{- $block := omit (deepCopy $provider) "secrets" }}
{{- $secrets := list }}
{{- range $index, $ref := $provider.secrets | default list }}
{{- if and (kindIs "map" $ref) (hasKey $ref "secretKeyRef") }}
{{- if eq ($ref.as | default "file") "env" }}
{{- $secrets = append $secrets (dict "env" (include "webhook-sidecar.secretEnvName" (list $key $index))) }}
{{- else }}
{{- $secrets = append $secrets (dict "file" (printf "%s/%s/%s" (include "webhook-sidecar.secretsDir" $) $ref.secretKeyRef.name $ref.secretKeyRef.key)) }}
{{- end }}
{{- else }}
{{- $secrets = append $secrets $ref }}
{{- end }}
{{- end }}
{{- $_ := set $block "secrets" $secrets }}
{{- $_ := set $providers $key $block }}
{{- end }}
{{- $_ := set $config "listen" (printf "0.0.0.0:%d" (int $v.ports.proxy)) }}
{{- $_ := set $config "admin_listen" (printf "0.0.0.0:%d" (int $v.ports.admin)) }}
{{- $_ := set $config "shutdown_timeout" (printf "%ds" (int $v.shutdownTimeoutSeconds)) }}
{{- $_ := set $config "upstream" $upstream }}
{{- $_ := set $config "store" $store }}
{{- if include "webhook-sidecar.adminTokenRef" . }}
{{- $_ := set $config "admin_token" "${WEBHOOK_SIDECAR_ADMIN_TOKEN}" }}
{{- end }}
{{- $_ := set $config "providers" $providers }}
{{- if $v.trustedProxies }}
{{- if hasKey $config "trusted_proxies" }}
{{- fail "trustedProxies and config.trusted_proxies both set: keep one (they are the same setting)" }}
{{- end }}
{{- $_ := set $config "trusted_proxies" $v.trustedProxies }}
{{- end }}
{{- toYaml $config }}
{{- end }}

{{/* Seconds the proxy may take to exit after shutdown_timeout: deliveries still running are
cancelled and unwind, their result writes finish, the store closes. The proxy's own constant,
sidecar.app.SHUTDOWN_OVERRUN (a test keeps the two equal). */}}
{{- define "webhook-sidecar.shutdownOverrunSeconds" -}}
2
{{- end }}

{{/* Render-time checks that values.schema.json cannot express. */}}
{{- define "webhook-sidecar.validate" -}}
{{- $grace := int .Values.terminationGracePeriodSeconds }}
{{- $overrun := int (include "webhook-sidecar.shutdownOverrunSeconds" .) }}
{{- $needed := add (int .Values.preStopSleepSeconds) (int .Values.shutdownTimeoutSeconds) $overrun }}
{{- if gt $needed $grace }}
{{- fail (printf "preStopSleepSeconds (%d) + shutdownTimeoutSeconds (%d) + %d (the proxy's exit after its shutdown timeout) must not exceed terminationGracePeriodSeconds (%d): the kubelet kills the proxy at the end of the grace period, before in-flight deliveries are recorded" (int .Values.preStopSleepSeconds) (int .Values.shutdownTimeoutSeconds) $overrun $grace) }}
{{- end }}
{{- if eq (int .Values.ports.proxy) (int .Values.ports.admin) }}
{{- fail "ports.proxy and ports.admin must differ: admin routes are never served to providers" }}
{{- end }}
{{- if and (eq .Values.mode "sidecar") (eq (int .Values.sidecar.appPort) (int .Values.ports.proxy)) }}
{{- fail "sidecar.appPort must differ from ports.proxy: both listen in the same pod" }}
{{- end }}
{{- if and (eq .Values.mode "sidecar") .Values.sidecar.native .Capabilities }}
{{- if semverCompare "<1.29.0-0" .Capabilities.KubeVersion.Version }}
{{- fail (printf "sidecar.native needs Kubernetes >= 1.29 (native sidecar containers, on by default from 1.29); this cluster is %s: set sidecar.native=false" .Capabilities.KubeVersion.Version) }}
{{- end }}
{{- end }}
{{- if regexMatch "^[A-Za-z][-+.A-Za-z0-9]*://[^/@]*:[^/@]*@" (.Values.store.url | default "") }}
{{- if not (regexMatch "^[A-Za-z][-+.A-Za-z0-9]*://[^/@:]*:\\$\\{[A-Za-z_][A-Za-z0-9_]*\\}@" .Values.store.url) }}
{{- fail "store.url holds a password, which would be written into a ConfigMap: put the whole URL in a Secret and set store.existingSecret {name, key} instead" }}
{{- end }}
{{- end }}
{{- if and (eq .Values.mode "standalone") (gt (int .Values.standalone.replicaCount) 1) (eq (include "webhook-sidecar.storeKind" .) "sqlite") }}
{{- fail "standalone.replicaCount > 1 needs a PostgreSQL, MySQL or MariaDB store (store.existingSecret or store.url): SQLite is one pod only" }}
{{- end }}
{{- range $key, $provider := .Values.providers }}
{{- range $ref := $provider.secrets | default list }}
{{- if and (kindIs "map" $ref) (hasKey $ref "secretKeyRef") }}
{{- if or (not $ref.secretKeyRef.name) (not $ref.secretKeyRef.key) }}
{{- fail (printf "providers.%s.secrets: secretKeyRef needs name and key" $key) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/* The pod fields the chart's own pods share (standalone Deployment, helm test pod) in both
modes: service account, pull secrets, pod security context. */}}
{{- define "webhook-sidecar.podIdentity" -}}
{{- with .Values.serviceAccountName }}
serviceAccountName: {{ . }}
{{- end }}
automountServiceAccountToken: false
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- end }}

{{/* Pod annotations that roll the pods when the config changes. PUBLIC. */}}
{{- define "webhook-sidecar.podAnnotations" -}}
checksum/webhook-sidecar-config: {{ include "webhook-sidecar.configYaml" . | sha256sum }}
{{- end }}

{{/* The grace period the pod needs. PUBLIC: use it for the pod's terminationGracePeriodSeconds. */}}
{{- define "webhook-sidecar.terminationGracePeriodSeconds" -}}
{{- include "webhook-sidecar.validate" . }}
{{- int .Values.terminationGracePeriodSeconds }}
{{- end }}

{{- define "webhook-sidecar.env" -}}
- name: WEBHOOK_SIDECAR_CONFIG
  value: {{ include "webhook-sidecar.configDir" . }}/config.yaml
{{- if .Values.store.existingSecret.name }}
- name: WEBHOOK_SIDECAR_STORE_URL
  valueFrom:
    secretKeyRef:
      name: {{ .Values.store.existingSecret.name }}
      key: {{ .Values.store.existingSecret.key }}
{{- end }}
{{- with include "webhook-sidecar.adminTokenRef" . }}
{{- $ref := fromJson . }}
- name: WEBHOOK_SIDECAR_ADMIN_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ $ref.name }}
      key: {{ $ref.key }}
{{- end }}
{{- with include "webhook-sidecar.signingSecretEnv" . }}
{{ . }}
{{- end }}
{{- range $key, $provider := .Values.providers }}
{{- range $index, $ref := $provider.secrets | default list }}
{{- if and (kindIs "map" $ref) (hasKey $ref "secretKeyRef") (eq ($ref.as | default "file") "env") }}
- name: {{ include "webhook-sidecar.secretEnvName" (list $key $index) }}
  valueFrom:
    secretKeyRef:
      name: {{ $ref.secretKeyRef.name }}
      key: {{ $ref.secretKeyRef.key }}
{{- end }}
{{- end }}
{{- end }}
{{- with .Values.tracing }}
{{- if .endpoint }}
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: {{ .endpoint | quote }}
{{- end }}
{{- if .serviceName }}
- name: OTEL_SERVICE_NAME
  value: {{ .serviceName | quote }}
{{- end }}
{{- with .resourceAttributes }}
{{- $pairs := list }}
{{- range $name, $value := . }}
{{- $pairs = append $pairs (printf "%s=%s" $name $value) }}
{{- end }}
- name: OTEL_RESOURCE_ATTRIBUTES
  value: {{ join "," $pairs | quote }}
{{- end }}
{{- if .sampler }}
- name: OTEL_TRACES_SAMPLER
  value: {{ .sampler | quote }}
{{- end }}
{{- if .samplerArg }}
- name: OTEL_TRACES_SAMPLER_ARG
  value: {{ .samplerArg | quote }}
{{- end }}
{{- if and .headersSecret .headersSecret.name }}
- name: OTEL_EXPORTER_OTLP_HEADERS
  valueFrom:
    secretKeyRef:
      name: {{ .headersSecret.name }}
      key: {{ .headersSecret.key }}
{{- end }}
{{- end }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "webhook-sidecar.volumeMounts" -}}
- name: webhook-sidecar-config
  mountPath: {{ include "webhook-sidecar.configDir" . }}
  readOnly: true
{{- range $name := include "webhook-sidecar.fileSecretNames" . | fromJsonArray }}
- name: {{ include "webhook-sidecar.secretVolumeName" $name }}
  mountPath: {{ include "webhook-sidecar.secretsDir" $ }}/{{ $name }}
  readOnly: true
{{- end }}
{{- if eq (include "webhook-sidecar.storeKind" .) "sqlite" }}
- name: webhook-sidecar-data
  mountPath: {{ dir .Values.store.sqlitePath }}
{{- end }}
- name: webhook-sidecar-tmp
  mountPath: /tmp
{{- with .Values.extraVolumeMounts }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The pod volumes the proxy needs. PUBLIC. */}}
{{- define "webhook-sidecar.volumes" -}}
- name: webhook-sidecar-config
  configMap:
    name: {{ include "webhook-sidecar.fullname" . }}-config
{{- range $name := include "webhook-sidecar.fileSecretNames" . | fromJsonArray }}
- name: {{ include "webhook-sidecar.secretVolumeName" $name }}
  secret:
    secretName: {{ $name }}
    defaultMode: {{ int $.Values.secretFileMode }}
{{- end }}
{{- if eq (include "webhook-sidecar.storeKind" .) "sqlite" }}
- name: webhook-sidecar-data
  emptyDir: {}
{{- end }}
- name: webhook-sidecar-tmp
  emptyDir:
    medium: Memory
    sizeLimit: 16Mi
{{- with .Values.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* PUBLIC: WEBHOOK_SIDECAR_SIGNING_SECRET from the forward-signing Secret (an env list item;
nothing when forwardSigning is off). The proxy signs every forward with it; give it to the app
container too, so it can verify that a request came through the proxy. */}}
{{- define "webhook-sidecar.signingSecretEnv" -}}
{{- with include "webhook-sidecar.forwardSigningRef" . -}}
{{- $ref := fromJson . -}}
- name: WEBHOOK_SIDECAR_SIGNING_SECRET
  valueFrom:
    secretKeyRef:
      name: {{ $ref.name }}
      key: {{ $ref.key }}
{{- end }}
{{- end }}

{{/* Seconds the app container must keep serving after the pod is told to stop. Classic
sidecar: both get SIGTERM together, so the app waits out the proxy's preStop sleep, its drain
(shutdownTimeoutSeconds) and its exit. Native sidecar: the proxy is stopped only after the app
has exited, so the app waits out only the endpoint removal (preStopSleepSeconds). */}}
{{- define "webhook-sidecar.appPreStopSeconds" -}}
{{- if and (eq .Values.mode "sidecar") .Values.sidecar.native }}
{{- int .Values.preStopSleepSeconds }}
{{- else }}
{{- add (int .Values.preStopSleepSeconds) (int .Values.shutdownTimeoutSeconds) (int (include "webhook-sidecar.shutdownOverrunSeconds" .)) }}
{{- end }}
{{- end }}

{{/* PUBLIC: a `lifecycle:` body for the APP container (not the proxy), so the app outlives the
proxy's drain: a preStop sleep of webhook-sidecar.appPreStopSeconds. The sleep action on
Kubernetes >= 1.30 (PodLifecycleSleepAction, on by default; no `sleep` binary needed in the app
image), else `exec: sleep` (the app image needs a sleep binary). Empty when 0 seconds. */}}
{{- define "webhook-sidecar.appLifecycle" -}}
{{- include "webhook-sidecar.requireContext" . }}
{{- $seconds := int (include "webhook-sidecar.appPreStopSeconds" .) }}
{{- if gt $seconds 0 -}}
preStop:
{{- if semverCompare ">=1.30.0-0" .Capabilities.KubeVersion.Version }}
  sleep:
    seconds: {{ $seconds }}
{{- else }}
  exec:
    command: ["sleep", "{{ $seconds }}"]
{{- end }}
{{- end }}
{{- end }}

{{/* The proxy container (one list item). `native` adds restartPolicy: Always. */}}
{{- define "webhook-sidecar.container" -}}
{{- include "webhook-sidecar.validate" . -}}
- name: webhook-sidecar
  image: {{ include "webhook-sidecar.image" . }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  {{- if and (eq .Values.mode "sidecar") .Values.sidecar.native }}
  restartPolicy: Always
  {{- end }}
  args: ["run"]
  ports:
    - name: webhooks
      containerPort: {{ int .Values.ports.proxy }}
      protocol: TCP
    - name: webhook-admin
      containerPort: {{ int .Values.ports.admin }}
      protocol: TCP
  env:
    {{- include "webhook-sidecar.env" . | nindent 4 }}
  volumeMounts:
    {{- include "webhook-sidecar.volumeMounts" . | nindent 4 }}
  startupProbe:
    httpGet: {path: /healthz, port: webhook-admin}
    {{- toYaml .Values.probes.startup | nindent 4 }}
  livenessProbe:
    httpGet: {path: /healthz, port: webhook-admin}
    {{- toYaml .Values.probes.liveness | nindent 4 }}
  readinessProbe:
    httpGet: {path: {{ include "webhook-sidecar.readinessPath" . }}, port: webhook-admin}
    {{- toYaml .Values.probes.readiness | nindent 4 }}
  {{- /* A native sidecar is stopped only after the app has exited, when the endpoints are
  gone already (the app's own preStop covered their removal): no sleep of its own. */}}
  {{- if and (gt (int .Values.preStopSleepSeconds) 0) (not (and (eq .Values.mode "sidecar") .Values.sidecar.native)) }}
  lifecycle:
    preStop:
      exec:
        command: ["sleep", "{{ int .Values.preStopSleepSeconds }}"]
  {{- end }}
  resources:
    {{- toYaml .Values.resources | nindent 4 }}
  securityContext:
    {{- toYaml .Values.securityContext | nindent 4 }}
{{- end }}

{{/* PUBLIC: the proxy for the pod's `containers:` list (nothing when native). */}}
{{- define "webhook-sidecar.containers" -}}
{{- if not .Values.sidecar.native }}
{{- include "webhook-sidecar.container" . }}
{{- end }}
{{- end }}

{{/* `webhook-sidecar migrate` before the proxy starts (a PostgreSQL, MySQL or MariaDB store,
migrate.enabled): an
init container of every proxy pod rather than a Helm hook, so that what it reads (the config,
the generated and the provider Secrets) exists when it runs. docs/design.md, "The schema step
in the chart". */}}
{{- define "webhook-sidecar.migrateContainer" -}}
{{- if and .Values.migrate.enabled (eq (include "webhook-sidecar.storeKind" .) "server") -}}
- name: webhook-sidecar-migrate
  image: {{ include "webhook-sidecar.image" . }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  args: ["migrate"]
  env:
    {{- include "webhook-sidecar.env" . | nindent 4 }}
  volumeMounts:
    {{- include "webhook-sidecar.volumeMounts" . | nindent 4 }}
  resources:
    {{- toYaml .Values.migrate.resources | nindent 4 }}
  securityContext:
    {{- toYaml .Values.securityContext | nindent 4 }}
{{- end }}
{{- end }}

{{/* PUBLIC: the pod's `initContainers:` list: the migrate step (PostgreSQL), then the proxy
when native. */}}
{{- define "webhook-sidecar.initContainers" -}}
{{- include "webhook-sidecar.migrateContainer" . }}
{{- if .Values.sidecar.native }}
{{ include "webhook-sidecar.container" . }}
{{- end }}
{{- end }}
