{{- define "quotagate.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "quotagate.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "quotagate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "quotagate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "quotagate.labels" -}}
{{ include "quotagate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The node ids whose listeners the pods and the Service open: brokerNodeIds [first, last]. */}}
{{- define "quotagate.brokerNodeIds" -}}
{{- $first := index .Values.proxy.brokerNodeIds 0 | int -}}
{{- $last := index .Values.proxy.brokerNodeIds 1 | int -}}
{{- if lt $last $first -}}{{- fail "proxy.brokerNodeIds must be [first, last] with first <= last" -}}{{- end -}}
{{- untilStep $first (add1 $last | int) 1 | toJson -}}
{{- end -}}
