{{/* Cambricon kubelet plugin (cambricon.strata.sh): MLU cards, whole and
as dynamic sMLUs. Cards are read with the host's cnmon, which also
switches a card's sMLU mode on and creates a claim's sMLU when it is
prepared and destroys it when it is released. cnmon is mounted read-only
at its host path (--cnmon), where the CDI specs also name it for the
containers that get it. --smlu-memory-unit is the step of the cards'
vmemory capacity. sMLUs are experimental: no public capture of cnmon's
sMLU syntax exists, so its arguments are configured (driver.smlu,
--smlu-*-args) with Strata's guess as the default.
PCI topology comes from sysfs and device majors from /proc/devices, which
the privileged container sees as the host's; device nodes are named by
their host paths in the CDI specs (--dev-root=/). The plugin asks cnmon
for each card's health every healthInterval (--health-interval) and taints
an unhealthy card's devices. Every cnmon run has a deadline
(--vendor-tool-timeout): a wedged one is killed, so that it cannot hang
the plugin. */}}
{{- define "strata.plugin.cambricon.args" -}}
- --dev-root=/
- --cnmon={{ .p.driver.cnmon }}
- --vendor-tool-timeout={{ .p.driver.vendorToolTimeout }}
- --smlu-memory-unit={{ .p.driver.smluMemoryUnit }}
- {{ printf "--smlu-info-args=%s" .p.driver.smlu.infoArgs | quote }}
- {{ printf "--smlu-create-args=%s" .p.driver.smlu.createArgs | quote }}
- {{ printf "--smlu-destroy-args=%s" .p.driver.smlu.destroyArgs | quote }}
{{- end -}}

{{- define "strata.plugin.cambricon.env" -}}
{{- end -}}

{{- /* The plugin runs in the pod network; privileged is enough. */}}
{{- define "strata.plugin.cambricon.pod" -}}
{{- end -}}

{{- define "strata.plugin.cambricon.capabilities" -}}
{{- end -}}

{{- /* With simulate, the plugin runs on a simulated machine that brings
stand-ins of the vendor's software: a node without accelerators has none
to mount. */}}
{{- define "strata.plugin.cambricon.mounts" -}}
{{- if not .p.simulate }}
- name: cnmon
  mountPath: {{ .p.driver.cnmon }}
  readOnly: true
{{- end }}
{{- end -}}

{{- define "strata.plugin.cambricon.volumes" -}}
{{- if not .p.simulate }}
- name: cnmon
  hostPath:
    path: {{ .p.driver.cnmon }}
    type: File
{{- end }}
{{- end -}}

{{- define "strata.plugin.cambricon.rules" -}}
{{- end -}}
