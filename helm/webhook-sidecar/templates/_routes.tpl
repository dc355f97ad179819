{{/*
Routes from outside (templates/ingress.yaml, templates/httproute.yaml): both are derived from
.Values.providers, the same values the config's `providers:` is rendered from, so a route and
the proxy's paths cannot drift apart.
*/}}

{{/* PUBLIC: the providers' paths as a JSON list of {provider, path}, sorted by provider key.
The proxy matches each path exactly (POST on the literal path), so a route should too. In
sidecar mode an app chart can route its own Ingress with it:
  {{- range include "webhook-sidecar.providerPaths" .Subcharts.webhookSidecar | fromJsonArray }}
A path written with ${VAR} is only known when the proxy starts: refused here. */}}
{{- define "webhook-sidecar.providerPaths" -}}
{{- $paths := list }}
{{- range $key, $provider := .Values.providers }}
{{- $path := $provider.path | default "" | toString }}
{{- if contains "$" $path }}
{{- fail (printf "providers.%s.path (%s) is interpolated when the proxy starts, so the Ingress/HTTPRoute cannot know it: write the literal path" $key $path) }}
{{- end }}
{{- if not (hasPrefix "/" $path) }}
{{- fail (printf "providers.%s.path must be a literal URL path starting with '/' to be routed from outside" $key) }}
{{- end }}
{{- /* What the API server refuses in an Ingress path (and Gateway API in an HTTPRoute's). */}}
{{- range $bad := list "//" "/./" "/../" "%2f" "%2F" "#" }}
{{- if contains $bad $path }}
{{- fail (printf "providers.%s.path (%s) cannot be routed from outside: Kubernetes refuses an Ingress or HTTPRoute path containing %q" $key $path $bad) }}
{{- end }}
{{- end }}
{{- if or (hasSuffix "/." $path) (hasSuffix "/.." $path) }}
{{- fail (printf "providers.%s.path (%s) cannot be routed from outside: Kubernetes refuses an Ingress or HTTPRoute path ending in /. or /.." $key $path) }}
{{- end }}
{{- $paths = append $paths (dict "provider" $key "path" $path) }}
{{- end }}
{{- $paths | toJson }}
{{- end }}

{{/* Routes reach the proxy through this chart's Service, which exists in standalone mode only.
Args: (list $ctx "ingress.enabled"). */}}
{{- define "webhook-sidecar.requireStandaloneService" -}}
{{- $ctx := index . 0 }}{{ $what := index . 1 }}
{{- if ne $ctx.Values.mode "standalone" }}
{{- fail (printf "%s needs mode: standalone. In sidecar mode the provider-facing Service is your app chart's: route the providers' paths to its port that targets the proxy's \"webhooks\" container port, in your chart (the named template \"webhook-sidecar.providerPaths\" lists them; docs/kubernetes.md, \"Reaching the proxy from outside\")" $what) }}
{{- end }}
{{- end }}

{{/* The external base URLs of the routes, as a JSON list of {via, base}: the Ingress's hosts
(https when a tls entry names the host) and the HTTPRoute's hostnames. */}}
{{- define "webhook-sidecar.externalBases" -}}
{{- $bases := list }}
{{- if .Values.ingress.enabled }}
{{- $tlsHosts := list }}
{{- range .Values.ingress.tls }}{{ $tlsHosts = concat $tlsHosts (.hosts | default list) }}{{ end }}
{{- range .Values.ingress.hosts | default (list "") }}
{{- $scheme := ternary "https" "http" (has . $tlsHosts) }}
{{- $bases = append $bases (dict "via" "Ingress" "base" (printf "%s://%s" $scheme (. | default "<the ingress controller's address>"))) }}
{{- end }}
{{- end }}
{{- if .Values.httpRoute.enabled }}
{{- range .Values.httpRoute.hostnames | default (list "") }}
{{- $bases = append $bases (dict "via" "HTTPRoute" "base" (printf "https://%s" (. | default "<the Gateway's address>"))) }}
{{- end }}
{{- end }}
{{- $bases | toJson }}
{{- end }}
