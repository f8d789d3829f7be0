{{/* Full name: the release name when it already says kopiur, else <release>-kopiur. */}}
{{- define "kopiur.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "kopiur.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: controller
{{- end -}}

{{/* Labels of the controller's objects. */}}
{{- define "kopiur.labels" -}}
{{ include "kopiur.selectorLabels" . }}
{{ include "kopiur.commonLabels" . }}
{{- end -}}

{{/* Not `managed-by: kopiur`: that label marks the operator's own children (Jobs, ConfigMaps). */}}
{{- define "kopiur.commonLabels" -}}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: kopiur
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "kopiur.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "kopiur.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "kopiur.image" -}}
{{- printf "%s:%s" .repository (default .appVersion .tag) -}}
{{- with .digest -}}@{{ . }}{{- end -}}
{{- end -}}

{{- define "kopiur.controllerImage" -}}
{{- include "kopiur.image" (dict "repository" .Values.image.repository "tag" .Values.image.tag "digest" .Values.image.digest "appVersion" .Chart.AppVersion) -}}
{{- end -}}

{{- define "kopiur.moverImage" -}}
{{- include "kopiur.image" (dict "repository" .Values.mover.image.repository "tag" .Values.mover.image.tag "digest" .Values.mover.image.digest "appVersion" .Chart.AppVersion) -}}
{{- end -}}

{{/* The ClusterRole the controller binds into each Job namespace; the name is fixed in the controller. */}}
{{- define "kopiur.moverClusterRole" -}}kopiur-mover{{- end -}}
