// Package fitplus is NodeResourcesFitPlus, Strata's DRA-aware version of
// the Koordinator (v1.6) score plugin of that name: each resource gets
// its own scoring type and weight, so one profile can pack GPUs
// (MostAllocated) while it spreads CPU and memory (LeastAllocated).
//
// # Configuration
//
// Args are kubescheduler.config.k8s.io/v1 NodeResourcesFitPlusArgs
// (package api/schedulerargs), as Koordinator users write them:
//
//	pluginConfig:
//	- name: NodeResourcesFitPlus
//	  args:
//	    apiVersion: kubescheduler.config.k8s.io/v1
//	    kind: NodeResourcesFitPlusArgs
//	    resources:
//	      nvidia.com/gpu: {type: MostAllocated, weight: 2}
//	      cpu: {type: LeastAllocated, weight: 1}
//	      memory: {type: LeastAllocated, weight: 1}
//
// A weight of 0 or none means 1; weights run from 1 to 100; type is
// required. Invalid args stop the scheduler with the field's path.
//
// # Score
//
// The resources scored are those the pod requests (request > 0, or a
// ResourceClaim that uses the resource's devices) that the args name;
// the others are ignored. For each, after the pod is placed on the node:
//
//	requested   = node's requested + pod's request
//	MostAllocated:  alloc == 0 ? 0 : min(requested, alloc) * 100 / alloc
//	LeastAllocated: alloc == 0 || requested > alloc ? 0 : (alloc - requested) * 100 / alloc
//	score = Σ score_r * weight_r / Σ weight_r   (integer division; 100 if nothing is scored)
//
// cpu and memory use the non-zero requests (100m and 200Mi for a
// container that requests none) of the pod and of the node's pods, as
// Koordinator and the in-tree scorers do; ephemeral-storage and extended
// resources the plain requests. The score is 0 to 100 with no
// normalization; the profile's plugin weight multiplies it.
//
// # DRA devices
//
// A resource name R also stands for the devices of every DeviceClass
// named R or whose spec.extendedResourceName is R (see package
// devicecount). On a node, R's allocatable adds the devices of the
// node's ResourceSlices that those classes select, and R's requested
// adds those allocated to any claim (a share of a device counts as the
// device). The pod adds what its unallocated claims ask of those classes
// (a request's count, or its first alternative's; for allocationMode All
// every free device on the node); a claim already allocated adds nothing,
// its devices being counted as allocated. When a node publishes R through
// a device plugin too, both counts add up. Where a node has no
// allocatable R of its own, requests of R served by DRA (the
// extended-resource mapping) are counted as the devices allocated for
// them, not a second time as pod requests.
//
// The DRA work happens once per cycle in PreScore, for the nodes being
// scored, and only when a resource the pod requests maps to a
// DeviceClass; Score is map lookups. A CPU-only pod, or a cluster without
// such classes, costs no more than Koordinator's plugin. kube-scheduler
// calls PreScore only where a profile enables the plugin at preScore or
// multiPoint; Koordinator's documented profile enables it at score alone,
// and then the cycle's first Score does PreScore's work, for every node
// of the snapshot rather than the feasible ones: same scores, more work.
package fitplus
