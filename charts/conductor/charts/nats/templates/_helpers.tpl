{{- define "nats.fullname" -}}{{ printf "%s-nats" .Release.Name }}{{- end -}}
{{- define "nats.selector" -}}
app.kubernetes.io/name: nats
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
{{- define "nats.labels" -}}
{{ include "nats.selector" . }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}
{{/* Kubernetes quantity (10Gi) to a nats-server size (10G, 1024-based). */}}
{{- define "nats.size" -}}{{ . | trimSuffix "i" }}{{- end -}}
