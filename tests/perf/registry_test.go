//go:build perf

package perf

import (
	"context"
	"fmt"
	"io/fs"
	"sync"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensions "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	"sigs.k8s.io/yaml"

	"github.com/strata-sh/strata/deployments"
	schedulerplugins "github.com/strata-sh/strata/scheduler-plugins"
	"github.com/strata-sh/strata/scheduler-plugins/gang"
)

// registry is strata-scheduler's registry. The harness starts a bare API
// server for each workload; StrataGang's factory first installs the CRDs
// the chart installs (PodGroup, ClusterNetworkTopology), as a cluster
// running strata-scheduler has them.
func registry() runtime.Registry {
	r := schedulerplugins.Registry()
	newGang := r[gang.Name]
	var mu sync.Mutex
	r[gang.Name] = func(ctx context.Context, obj k8sruntime.Object, h fwk.Handle) (fwk.Plugin, error) {
		mu.Lock()
		err := installCRDs(ctx, h)
		mu.Unlock()
		if err != nil {
			return nil, err
		}
		return newGang(ctx, obj, h)
	}
	return r
}

// installCRDs creates the chart's CRDs and waits until they are served.
func installCRDs(ctx context.Context, h fwk.Handle) error {
	client, err := apiextensions.NewForConfig(h.KubeConfig())
	if err != nil {
		return err
	}
	files, err := fs.Glob(deployments.Chart(), "crds/*.yaml")
	if err != nil || len(files) == 0 {
		return fmt.Errorf("chart CRDs: %v (%d files)", err, len(files))
	}
	for _, f := range files {
		raw, err := fs.ReadFile(deployments.Chart(), f)
		if err != nil {
			return err
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(raw, crd); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		if _, err := client.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create CRD %s: %w", crd.Name, err)
		}
		err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			got, err := client.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd.Name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			for _, c := range got.Status.Conditions {
				if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return fmt.Errorf("CRD %s not established: %w", crd.Name, err)
		}
	}
	return nil
}
