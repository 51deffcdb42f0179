{{/*
Shared pieces. The ConfigMaps are named like kustomize's configMapGenerator names them (manifests/), with the
content hash suffix computed the way sigs.k8s.io/kustomize/api/hasher (v0.21.1) does: sha256 of the JSON of
{data, kind, name} (Go's json.Marshal: sorted keys, <>& escaped, as sprig's toJson), first 10 hex digits with
0 1 3 a e spelt g h k m t. The name is hashed as "": encodeConfigMap looks it up with yaml.Lookup("metadata/name"),
one field literally named so, which never exists. So a config change renames
the ConfigMap and rolls the pods, and the default render equals `kubectl kustomize manifests/`.
*/}}

{{- define "dra.labels" -}}
{{- $labels := merge (dict) (.extra | default dict) (.root.Values.commonLabels | default dict) -}}
{{- if $labels }}
labels:
{{- toYaml $labels | nindent 2 }}
{{- end }}
{{- end -}}

{{- define "dra.hashedName" -}}
{{- $hash := dict "kind" "ConfigMap" "name" "" "data" .data | toJson | sha256sum | trunc 10 -}}
{{- printf "%s-%s" .name ($hash | replace "0" "g" | replace "1" "h" | replace "3" "k" | replace "a" "m" | replace "e" "t") -}}
{{- end -}}

{{- define "dra.tlsDir" -}}/etc/dra-quota-scheduler-tls{{- end -}}

{{/* A config file's text: verbatim when the values change nothing in it, else the merged document. */}}
{{- define "dra.render" -}}
{{- if eq (toYaml .config) (toYaml (fromYaml .text)) -}}
{{- .text -}}
{{- else -}}
{{- printf "%s\n" (toYaml .config) -}}
{{- end -}}
{{- end -}}

{{/* files/extender.yaml with bind, TLS and .Values.extender.config applied. */}}
{{- define "dra.extenderConfig" -}}
{{- $text := .Files.Get "files/extender.yaml" -}}
{{- $config := fromYaml $text -}}
{{- if .Values.bind.enabled -}}
{{- $_ := set $config "bind" (merge (dict "enabled" true) ($config.bind | default dict)) -}}
{{- end -}}
{{- if .Values.tls.enabled -}}
{{- $dir := include "dra.tlsDir" . -}}
{{- $tls := dict "certFile" (printf "%s/tls.crt" $dir) "keyFile" (printf "%s/tls.key" $dir) -}}
{{- if .Values.tls.clientAuth -}}
{{- $_ := set $tls "clientCAFile" (printf "%s/ca.crt" $dir) -}}
{{- end -}}
{{- $_ := set $config "tls" $tls -}}
{{- end -}}
{{- $config = mergeOverwrite $config (deepCopy (.Values.extender.config | default dict)) -}}
{{- include "dra.render" (dict "text" $text "config" $config) -}}
{{- end -}}

{{/* files/kube-scheduler-config.yaml with the lease namespace, bind, TLS and .Values.scheduler.config applied. */}}
{{- define "dra.schedulerConfig" -}}
{{- $text := .Files.Get "files/kube-scheduler-config.yaml" -}}
{{- $config := fromYaml $text -}}
{{- $_ := set $config.leaderElection "resourceNamespace" .Release.Namespace -}}
{{- $extender := index $config.extenders 0 -}}
{{- if .Values.bind.enabled -}}
{{- $_ := set $extender "bindVerb" "bind" -}}
{{- end -}}
{{- if .Values.tls.enabled -}}
{{- $dir := include "dra.tlsDir" . -}}
{{- $_ := set $extender "urlPrefix" (regexReplaceAll "^http:" $extender.urlPrefix "https:") -}}
{{- $_ := set $extender "enableHTTPS" true -}}
{{- $tlsConfig := dict "caFile" (printf "%s/ca.crt" $dir) -}}
{{- if .Values.tls.clientAuth -}}
{{- $_ := set $tlsConfig "certFile" (printf "%s/client.crt" $dir) -}}
{{- $_ := set $tlsConfig "keyFile" (printf "%s/client.key" $dir) -}}
{{- end -}}
{{- $_ := set $extender "tlsConfig" $tlsConfig -}}
{{- end -}}
{{- $config = mergeOverwrite $config (deepCopy (.Values.scheduler.config | default dict)) -}}
{{- include "dra.render" (dict "text" $text "config" $config) -}}
{{- end -}}

{{- define "dra.extenderConfigMapName" -}}
{{- include "dra.hashedName" (dict "name" "dra-extender-config" "data" (dict "extender.yaml" (include "dra.extenderConfig" .))) -}}
{{- end -}}

{{- define "dra.schedulerConfigMapName" -}}
{{- include "dra.hashedName" (dict "name" "dra-quota-scheduler-config" "data" (dict "kube-scheduler-config.yaml" (include "dra.schedulerConfig" .))) -}}
{{- end -}}

{{- define "dra.checks" -}}
{{- if and .Values.tls.enabled (not .Values.tls.secretName) -}}
{{- fail "tls.enabled needs tls.secretName: a Secret with tls.crt, tls.key and ca.crt (and client.crt/client.key with tls.clientAuth)" -}}
{{- end -}}
{{- if lt (int .Values.replicas) 1 -}}
{{- fail "replicas must be at least 1" -}}
{{- end -}}
{{- end -}}
