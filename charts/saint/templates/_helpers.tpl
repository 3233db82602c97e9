{{/*
Names and labels shared by every template.
*/}}

{{- define "saint.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Release-scoped name: "<release>-saint", or the release name when it already contains "saint". */}}
{{- define "saint.fullname" -}}
{{- if contains .Chart.Name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "saint.operatorName" -}}
{{- printf "%s-operator" (include "saint.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "saint.embedderName" -}}
{{- printf "%s-embedder" (include "saint.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The shared embedder's pod labels. The operator opens bots' egress to pods with
exactly name=saint-embedder and component=embedder (settings::SHARED_EMBEDDER_POD_LABELS). */}}
{{- define "saint.embedderSelectorLabels" -}}
app.kubernetes.io/name: saint-embedder
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: embedder
{{- end }}

{{- define "saint.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "saint.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: saint
{{- end }}

{{/* Selector labels never change between upgrades (Deployment selectors are immutable). */}}
{{- define "saint.selectorLabels" -}}
app.kubernetes.io/name: {{ include "saint.name" . }}-operator
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{- define "saint.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "saint.operatorName" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* "repository:tag" with the tag defaulting to the chart's appVersion. Call with (dict "image" .Values.x.image "root" .). */}}
{{- define "saint.imageRef" -}}
{{- printf "%s:%s" .image.repository (default .root.Chart.AppVersion .image.tag) }}
{{- end }}

{{- define "saint.operatorImage" -}}
{{- include "saint.imageRef" (dict "image" .Values.image "root" .) }}
{{- end }}

{{- define "saint.agentImage" -}}
{{- include "saint.imageRef" (dict "image" .Values.agent.image "root" .) }}
{{- end }}

{{- define "saint.porterImage" -}}
{{- include "saint.imageRef" (dict "image" .Values.porter.image "root" .) }}
{{- end }}

{{- define "saint.sandboxImage" -}}
{{- include "saint.imageRef" (dict "image" .Values.sandbox.image "root" .) }}
{{- end }}

{{/* Every image the admission policy accepts for sandbox containers, as a JSON list (a valid CEL list literal). */}}
{{- define "saint.allowedSandboxImages" -}}
{{- $images := list (include "saint.sandboxImage" .) }}
{{- range .Values.sandbox.extraAllowedImages }}
{{- $images = append $images . }}
{{- end }}
{{- $images | uniq | toJson }}
{{- end }}
