{{/* RDMA kubelet plugin (rdma.strata.sh): NICs and their SR-IOV virtual
functions are found in the host's sysfs, device nodes (/dev/infiniband)
are named by their host paths in the CDI specs (--dev-root=/). VF
settings (VLAN, trust, spoof check, rate) are made through netlink on the
physical function and the VF's MTU on its netdev, both in the host's
network namespace: the pod runs on the host network with NET_ADMIN. */}}
{{- define "strata.plugin.rdma.args" -}}
- --dev-root=/
{{- with .p.driver.railDevices }}
- --rail-devices={{ join "," . }}
{{- end }}
{{- end -}}

{{- define "strata.plugin.rdma.env" -}}
{{- end -}}

{{- define "strata.plugin.rdma.mounts" -}}
{{- end -}}

{{- define "strata.plugin.rdma.volumes" -}}
{{- end -}}

{{- /* Pod-level fields of the plugin's pod. */}}
{{- define "strata.plugin.rdma.pod" -}}
hostNetwork: true
dnsPolicy: ClusterFirstWithHostNet
{{- end -}}

{{- /* Capabilities added to the plugin container's. */}}
{{- define "strata.plugin.rdma.capabilities" -}}
- NET_ADMIN
{{- end -}}

{{- define "strata.plugin.rdma.rules" -}}
{{- end -}}
