// Package v1alpha1 holds the opaque device configurations of Strata's
// drivers (group config.strata.sh). Users put them in a ResourceClaim's
// spec.devices.config[].opaque.parameters, or operators in a DeviceClass's
// config; the driver decodes them strictly at prepare time.
//
// +kubebuilder:object:generate=true
// +groupName=config.strata.sh
package v1alpha1
