{{/* Huawei Ascend kubelet plugin (ascend.strata.sh): NPU chips, the vNPU
templates they offer and the vNPUs they hold are read with the host's
npu-smi, which also creates a claim's vNPUs when it is prepared and
destroys them when it is released. npu-smi and the driver's install root
(the libraries npu-smi loads, put on npu-smi's own LD_LIBRARY_PATH by
--driver-root) are mounted read-only at their host paths.
PCI topology comes from sysfs and device majors from /proc/devices, which
the privileged container sees as the host's; device nodes are named by
their host paths in the CDI specs (--dev-root=/). The plugin asks npu-smi
for each chip's health every healthInterval (--health-interval) and taints
an unhealthy chip's devices. Every npu-smi run has a deadline
(--vendor-tool-timeout): a wedged one is killed, so that it cannot hang
the plugin. */}}
{{- define "strata.plugin.ascend.args" -}}
- --dev-root=/
- --npu-smi={{ .p.driver.npuSmi }}
- --vendor-tool-timeout={{ .p.driver.vendorToolTimeout }}
- --driver-root={{ .p.driver.root }}
- --dcmi-dir={{ .p.driver.dcmi }}
{{- end -}}

{{- define "strata.plugin.ascend.env" -}}
{{- end -}}

{{- /* The plugin runs in the pod network; privileged is enough. */}}
{{- define "strata.plugin.ascend.pod" -}}
{{- end -}}

{{- define "strata.plugin.ascend.capabilities" -}}
{{- end -}}

{{- /* With simulate, the plugin runs on a simulated machine that brings
stand-ins of the vendor's software: a node without accelerators has none
to mount. */}}
{{- define "strata.plugin.ascend.mounts" -}}
{{- if not .p.simulate }}
- name: driver-root
  mountPath: {{ .p.driver.root }}
  readOnly: true
- name: npu-smi
  mountPath: {{ .p.driver.npuSmi }}
  readOnly: true
{{- end }}
{{- end -}}

{{- define "strata.plugin.ascend.volumes" -}}
{{- if not .p.simulate }}
- name: driver-root
  hostPath:
    path: {{ .p.driver.root }}
    type: Directory
- name: npu-smi
  hostPath:
    path: {{ .p.driver.npuSmi }}
    type: File
{{- end }}
{{- end -}}

{{- define "strata.plugin.ascend.rules" -}}
{{- end -}}
