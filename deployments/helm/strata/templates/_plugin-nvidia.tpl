{{/* NVIDIA kubelet plugin: the driver's library and tools come from the
host's driver root, mounted read-only at /driver-root; device nodes
are checked under the host's /dev, mounted at /host/dev. */}}
{{- define "strata.plugin.nvidia.args" -}}
- --dev-root=/host
- --mig-mode={{ .p.driver.migMode }}
- --hami-core-library={{ .p.driver.hamiCoreLibrary }}
{{- with .p.driver.fabricPartitionsFile }}
- --fabric-partitions-file={{ . }}
{{- end }}
- --nvidia-smi=/driver-root/usr/bin/nvidia-smi
- --mps-control=/driver-root/usr/bin/nvidia-cuda-mps-control
{{- end -}}

{{- define "strata.plugin.nvidia.env" -}}
- name: LD_LIBRARY_PATH
  value: /driver-root/usr/lib64:/driver-root/usr/lib/x86_64-linux-gnu:/driver-root/usr/lib/aarch64-linux-gnu
{{- end -}}

{{- define "strata.plugin.nvidia.mounts" -}}
- name: driver-root
  mountPath: /driver-root
  readOnly: true
  mountPropagation: HostToContainer
- name: host-dev
  mountPath: /host/dev
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
- name: host-dev
  hostPath:
    path: /dev
    type: Directory
{{- with .p.driver.fabricPartitionsFile }}
- name: fabric-partitions
  hostPath:
    path: {{ . }}
    type: File
{{- end }}
{{- end -}}
