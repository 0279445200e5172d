package schedulerargs

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	kubeschedulerv1 "k8s.io/kube-scheduler/config/v1"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"
)

// GroupName is kube-scheduler's configuration group, which the args
// share with the in-tree plugins' args (and Koordinator's).
const GroupName = schedconfig.GroupName

var (
	// SchemeGroupVersion is the version users write the args in.
	SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1"}
	// internalGroupVersion is the version the scheduler hands plugins.
	internalGroupVersion = schema.GroupVersion{Group: GroupName, Version: runtime.APIVersionInternal}
)

// AddToScheme registers the args, in both versions, with their defaults.
func AddToScheme(s *runtime.Scheme) error {
	for _, gv := range []schema.GroupVersion{SchemeGroupVersion, internalGroupVersion} {
		s.AddKnownTypes(gv, &NodeResourcesFitPlusArgs{}, &ScarceResourceAvoidanceArgs{}, &StrataFragmentationArgs{})
	}
	s.AddTypeDefaultingFunc(&NodeResourcesFitPlusArgs{}, func(obj any) { obj.(*NodeResourcesFitPlusArgs).Default() })
	s.AddTypeDefaultingFunc(&StrataFragmentationArgs{}, func(obj any) { obj.(*StrataFragmentationArgs).Default() })
	return nil
}

// init registers the args where kube-scheduler looks for them. The
// config loader decodes plugin args with scheme.Scheme, whose init has
// already run; defaulting and the v1-to-internal step use a second scheme
// that kube-scheduler builds later, on first use, from the two scheme
// builders below, so the args go into those too. Adding a type twice to
// a scheme is a no-op.
func init() {
	kubeschedulerv1.SchemeBuilder.Register(AddToScheme)
	schedconfig.SchemeBuilder.Register(AddToScheme)
	utilruntime.Must(AddToScheme(scheme.Scheme))
}
