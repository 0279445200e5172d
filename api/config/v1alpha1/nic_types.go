package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NicConfigKind is the kind of NicConfig.
const NicConfigKind = "NicConfig"

// NicConfig configures the RDMA devices (rdma.strata.sh) of a claim.
//
// +kubebuilder:object:root=true
type NicConfig struct {
	metav1.TypeMeta `json:",inline"`

	// VF configures an SR-IOV virtual function (DeviceClass
	// rdma-vf.strata.sh) for the claim: the settings are applied through
	// the physical function when the claim is prepared and reset when it
	// is unprepared. It is only valid for virtual functions.
	//
	// +optional
	VF *VFConfig `json:"vf,omitempty"`
}

// VFConfig is what the physical function sets on one of its virtual
// functions, as "ip link set <pf> vf <n> ..." does.
type VFConfig struct {
	// VLAN tags the VF's traffic with this VLAN id (1-4094). Ethernet
	// (RoCE) ports only.
	//
	// +optional
	VLAN *int32 `json:"vlan,omitempty"`

	// VLANQoS is the 802.1p priority (0-7) of the VLAN tag; requires vlan.
	//
	// +optional
	VLANQoS *int32 `json:"vlanQoS,omitempty"`

	// Trust lets the VF change its MAC address and enter promiscuous or
	// multicast-promiscuous mode.
	//
	// +optional
	Trust *bool `json:"trust,omitempty"`

	// SpoofCheck drops frames whose source MAC is not the VF's. Ethernet
	// ports only.
	//
	// +optional
	SpoofCheck *bool `json:"spoofCheck,omitempty"`

	// MTU of the VF's network interface: 68-9978 on Ethernet, 256-4092
	// on InfiniBand (IPoIB datagram mode).
	//
	// +optional
	MTU *int32 `json:"mtu,omitempty"`

	// MaxTxRate caps the VF's transmit rate in bits per second (for
	// example 100G); whole megabits, at least 1M.
	//
	// +optional
	MaxTxRate *resource.Quantity `json:"maxTxRate,omitempty"`
}
