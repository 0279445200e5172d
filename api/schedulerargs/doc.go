// Package schedulerargs holds the arguments of Strata's score plugins
// NodeResourcesFitPlus and ScarceResourceAvoidance, a versioned API in
// kube-scheduler's own configuration group.
//
// Koordinator (v1.6) users write these args as
// kubescheduler.config.k8s.io/v1 NodeResourcesFitPlusArgs and
// ScarceResourceAvoidanceArgs inside a KubeSchedulerConfiguration, so
// Strata registers the same kinds in the same group: such a configuration
// works unchanged. Importing this package registers them (init) with
// kube-scheduler's configuration scheme, where the scheduler's config
// loader decodes plugin args: strictly (an unknown field is an error),
// then with the defaults below. Validation runs in the plugins' New, so
// an invalid field stops the scheduler with the field's path.
//
// One set of Go types serves both the internal version (what plugins
// receive) and v1 (what users write): the schemas are identical, so there
// is nothing to convert, and the scheme hands the decoded object over as
// it is.
//
// +kubebuilder:object:generate=true
// +groupName=kubescheduler.config.k8s.io
package schedulerargs
