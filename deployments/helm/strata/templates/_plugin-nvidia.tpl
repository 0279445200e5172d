{{/* NVIDIA kubelet plugin: NVML and the driver's tools come from the
host's driver root, mounted read-only at /driver-root. NVML is loaded by
path (--nvml-library), never through LD_LIBRARY_PATH, which would make
the plugin load the host's libc. Device nodes are named by their host
paths in the CDI specs (--dev-root=/). */}}
{{- define "strata.plugin.nvidia.args" -}}
- --dev-root=/
- --nvml-library=/driver-root/usr/lib64/libnvidia-ml.so.1:/driver-root/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1:/driver-root/usr/lib/aarch64-linux-gnu/libnvidia-ml.so.1:/driver-root/lib64/libnvidia-ml.so.1
- --mig-mode={{ .p.driver.migMode }}
- --hami-core-library={{ .p.driver.hamiCoreLibrary }}
{{- if not .p.simulate }}
- --hami-core-check=/hami-core/{{ base .p.driver.hamiCoreLibrary }}
{{- end }}
{{- with .p.driver.fabricPartitionsFile }}
- --fabric-partitions-file={{ . }}
{{- end }}
- --nvidia-smi=/driver-root/usr/bin/nvidia-smi
- --mps-control=/driver-root/usr/bin/nvidia-cuda-mps-control
- --mps-daemon={{ .p.mps.daemon }}
{{- if eq .p.mps.daemon "pod" }}
- --mps-daemon-image={{ include "strata.image" (dict "root" .root "image" .p.image) }}
- --mps-daemon-driver-root={{ .p.driver.root }}
{{- with .p.priorityClassName }}
- --mps-daemon-priority-class={{ . }}
{{- end }}
{{- with .root.Values.imagePullSecrets }}
- --mps-daemon-image-pull-secrets={{ range $i, $s := . }}{{ if $i }},{{ end }}{{ $s.name }}{{ end }}
{{- end }}
{{- end }}
{{- end -}}

{{- /* Rules in the release namespace: the MPS daemon pods, which the
node-restricted-mps-pods policy keeps to the plugin's own node. */}}
{{- define "strata.plugin.nvidia.rules" -}}
{{- if eq .p.mps.daemon "pod" }}
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, create, delete]
{{- end }}
{{- end -}}

{{- define "strata.plugin.nvidia.env" -}}
{{- end -}}

{{- /* The plugin runs in the pod network; privileged is enough. */}}
{{- define "strata.plugin.nvidia.pod" -}}
{{- end -}}

{{- define "strata.plugin.nvidia.capabilities" -}}
{{- end -}}

{{- define "strata.plugin.nvidia.mounts" -}}
- name: driver-root
  mountPath: /driver-root
  readOnly: true
  mountPropagation: HostToContainer
{{- if not .p.simulate }}
# HAMi-core's folder, to check the library is there before a shared-GPU
# container is told to preload it.
- name: hami-core
  mountPath: /hami-core
  readOnly: true
{{- end }}
{{- with .p.driver.fabricPartitionsFile }}
- name: fabric-partitions
  mountPath: {{ . }}
  readOnly: true
{{- end }}
{{- end -}}

{{- define "strata.plugin.nvidia.volumes" -}}
- name: driver-root
  hostPath:
    path: {{ .p.driver.root }}
    type: Directory
{{- if not .p.simulate }}
- name: hami-core
  hostPath:
    # Created empty where HAMi-core is not installed (the check then
    # refuses HAMi shares there, naming the library).
    path: {{ dir .p.driver.hamiCoreLibrary }}
    type: DirectoryOrCreate
{{- end }}
{{- with .p.driver.fabricPartitionsFile }}
- name: fabric-partitions
  hostPath:
    path: {{ . }}
    type: File
{{- end }}
{{- end -}}
