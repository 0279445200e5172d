{{/* Name prefix of every object: the release name, or "strata". */}}
{{- define "strata.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels of every object; call with (dict "root" $ "component" "x"). */}}
{{- define "strata.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
{{- with .component }}
app.kubernetes.io/component: {{ . }}
{{- end }}
{{- end -}}

{{/* Selector labels of a component's pods; same argument as strata.labels. */}}
{{- define "strata.selectorLabels" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* Image reference; call with (dict "root" $ "image" .Values.x.image). */}}
{{- define "strata.image" -}}
{{- $tag := .image.tag | default .root.Values.image.tag | default .root.Chart.AppVersion -}}
{{- printf "%s/%s:%s" .root.Values.image.registry .image.repository $tag -}}
{{- end -}}

{{/* Service account user name of a component, as RBAC and policies see it. */}}
{{- define "strata.serviceAccountUser" -}}
{{- printf "system:serviceaccount:%s:%s" .root.Release.Namespace .name -}}
{{- end -}}

{{- define "strata.schedulerName" -}}{{ include "strata.fullname" . }}-scheduler{{- end -}}
{{- define "strata.controllerName" -}}{{ include "strata.fullname" . }}-controller{{- end -}}
{{- define "strata.webhookService" -}}{{ include "strata.fullname" . }}-controller-webhook{{- end -}}
{{- define "strata.webhookSecret" -}}{{ include "strata.fullname" . }}-controller-webhook-cert{{- end -}}
{{- define "strata.webhookConfig" -}}{{ include "strata.fullname" . }}-validation{{- end -}}
{{- define "strata.routingConfig" -}}{{ include "strata.fullname" . }}-routing{{- end -}}

{{/* Whether strata-controller routes pods that may use Strata's devices
to strata-scheduler: "true" or "". Not when strata-scheduler replaces the
default scheduler: pods that name none are its own then. */}}
{{- define "strata.routePods" -}}
{{- if and .Values.controller.enabled .Values.controller.webhook.enabled .Values.controller.webhook.routePods.enabled .Values.scheduler.enabled (not .Values.scheduler.replaceDefaultScheduler) -}}true{{- end -}}
{{- end -}}

{{/* Extended resources that Strata's DeviceClasses map (the installed
classes' extendedResourceName) and those the values add, as a JSON list. */}}
{{- define "strata.mappedExtendedResources" -}}
{{- $names := .Values.controller.webhook.routePods.extendedResources -}}
{{- range $vendor, $p := .Values.plugins }}
{{- if and $p.enabled $p.deviceClasses }}
{{- range $path, $_ := $.Files.Glob (printf "files/deviceclasses/%s-*.yaml" $vendor) }}
{{- $class := $.Files.Get $path | fromYaml }}
{{- with $class.spec.extendedResourceName }}
{{- $names = append $names . }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- $names | uniq | sortAlpha | toJson -}}
{{- end -}}

{{/* The DRA driver name of each vendor's kubelet plugin. */}}
{{- define "strata.driverNames" -}}
nvidia: nvidia.strata.sh
rdma: rdma.strata.sh
ascend: ascend.strata.sh
cambricon: cambricon.strata.sh
{{- end -}}

{{/* Pod-level fields shared by every component; call with (dict "root" $ "c" .Values.x). */}}
{{- define "strata.podPlacement" -}}
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets:
{{- toYaml . | nindent 2 }}
{{- end }}
{{- with .c.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .c.nodeSelector }}
nodeSelector:
{{- toYaml . | nindent 2 }}
{{- end }}
{{- with .c.tolerations }}
tolerations:
{{- toYaml . | nindent 2 }}
{{- end }}
{{- with .c.affinity }}
affinity:
{{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
