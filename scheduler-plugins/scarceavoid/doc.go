// Package scarceavoid is ScarceResourceAvoidance, Strata's DRA-aware
// version of the Koordinator (v1.6) score plugin of that name: it keeps
// pods that do not need a scarce resource (GPUs, say) off the nodes that
// have it, so that those nodes stay free for the pods that do.
//
// # Configuration
//
// Args are kubescheduler.config.k8s.io/v1 ScarceResourceAvoidanceArgs
// (package api/schedulerargs), as Koordinator users write them:
//
//	pluginConfig:
//	- name: ScarceResourceAvoidance
//	  args:
//	    apiVersion: kubescheduler.config.k8s.io/v1
//	    kind: ScarceResourceAvoidanceArgs
//	    resources: [nvidia.com/gpu]
//
// The list is required, without duplicates; invalid args stop the
// scheduler with the field's path.
//
// # Score
//
// The score looks at resource types, not amounts:
//
//	node types  = resources with allocatable > 0 on the node (cpu, memory,
//	              ephemeral-storage, hugepages, extended resources, and the
//	              args' resources that stand for DRA devices the node has)
//	pod types   = resources the pod requests (> 0), and the args'
//	              resources its ResourceClaims use
//	unrequested = node types − pod types
//	scarce      = unrequested ∩ args.resources
//	score = |unrequested| == 0 || |scarce| == 0 ? 100
//	      : (|unrequested| − |scarce|) * 100 / |unrequested|   (integer division)
//
// So a pod that requests the scarce resource, or a node without it,
// scores 100; a CPU pod on a GPU node scores less, the less so the more
// other resource types the node offers that the pod leaves unused
// (Koordinator's documented example: 5 of 6 unrequested types not scarce
// gives 83; a node with only cpu, memory and GPUs gives 0). The score is
// 0 to 100 with no normalization; the profile's plugin weight multiplies
// it.
//
// # DRA devices
//
// A resource name R in the args also stands for the devices of every
// DeviceClass named R or whose spec.extendedResourceName is R (see
// package devicecount). A node whose ResourceSlices publish at least one
// device those classes select has type R, as if R were in its
// allocatable; a pod whose claims ask one of those classes requests R.
// Nodes' devices are counted once per cycle in PreScore, for the nodes
// being scored, and only when some arg names a DeviceClass and the pod
// does not request it already; allocations are not needed. Where a
// profile enables the plugin at score only (as Koordinator's
// documentation does), kube-scheduler does not call PreScore, and the
// cycle's first Score does its work, for every node of the snapshot.
package scarceavoid
