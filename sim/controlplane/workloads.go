package controlplane

import (
	"context"
	"fmt"
	"time"

	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/informers"
	schedulinginformers "k8s.io/client-go/informers/scheduling/v1beta1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/controller/cronjob"
	"k8s.io/kubernetes/pkg/controller/daemon"
	"k8s.io/kubernetes/pkg/controller/deployment"
	"k8s.io/kubernetes/pkg/controller/job"
	"k8s.io/kubernetes/pkg/controller/replicaset"
	"k8s.io/kubernetes/pkg/controller/replication"
	"k8s.io/kubernetes/pkg/controller/statefulset"
	"k8s.io/kubernetes/pkg/features"
)

// WorkloadControllers are the kube-controller-manager controllers that
// turn users' workload objects into pods, in the order they start.
var WorkloadControllers = []string{"deployment", "replicaset", "replicationcontroller", "statefulset", "daemonset", "job", "cronjob"}

// startWorkloadControllers runs kube-controller-manager's own workload
// controllers, so that Deployments, ReplicaSets, ReplicationControllers,
// StatefulSets, DaemonSets, Jobs and CronJobs create their pods as in a
// real cluster.
// The worker counts are kube-controller-manager's defaults; the caller
// starts factory.
func startWorkloadControllers(ctx context.Context, client kubernetes.Interface, factory informers.SharedInformerFactory) error {
	pods := factory.Core().V1().Pods()
	named := func(name string) context.Context {
		return klog.NewContext(ctx, klog.LoggerWithName(klog.FromContext(ctx), name+"-controller"))
	}

	dc, err := deployment.NewDeploymentController(named("deployment"), factory.Apps().V1().Deployments(), factory.Apps().V1().ReplicaSets(), pods, client)
	if err != nil {
		return fmt.Errorf("create Deployment controller: %w", err)
	}
	rsc := replicaset.NewReplicaSetController(named("replicaset"), factory.Apps().V1().ReplicaSets(), pods, client, replicaset.BurstReplicas)
	rcm := replication.NewReplicationManager(named("replicationcontroller"), pods, factory.Core().V1().ReplicationControllers(), client, replication.BurstReplicas)
	ssc := statefulset.NewStatefulSetController(named("statefulset"), pods, factory.Apps().V1().StatefulSets(),
		factory.Core().V1().PersistentVolumeClaims(), factory.Apps().V1().ControllerRevisions(), client)
	dsc, err := daemon.NewDaemonSetsController(named("daemonset"), factory.Apps().V1().DaemonSets(), factory.Apps().V1().ControllerRevisions(),
		pods, factory.Core().V1().Nodes(), client, flowcontrol.NewBackOff(1*time.Second, 15*time.Minute))
	if err != nil {
		return fmt.Errorf("create DaemonSet controller: %w", err)
	}
	var workloads schedulinginformers.WorkloadInformer
	var podGroups schedulinginformers.PodGroupInformer
	if utilfeature.DefaultFeatureGate.Enabled(features.WorkloadWithJob) {
		workloads, podGroups = factory.Scheduling().V1beta1().Workloads(), factory.Scheduling().V1beta1().PodGroups()
	}
	jc, err := job.NewController(named("job"), client, pods, factory.Batch().V1().Jobs(), workloads, podGroups)
	if err != nil {
		return fmt.Errorf("create Job controller: %w", err)
	}
	cjc, err := cronjob.NewControllerV2(named("cronjob"), factory.Batch().V1().Jobs(), factory.Batch().V1().CronJobs(), client)
	if err != nil {
		return fmt.Errorf("create CronJob controller: %w", err)
	}
	go dc.Run(named("deployment"), 5)
	go rsc.Run(named("replicaset"), 5)
	go rcm.Run(named("replicationcontroller"), 5)
	go ssc.Run(named("statefulset"), 5)
	go dsc.Run(named("daemonset"), 2)
	go jc.Run(named("job"), 5)
	go cjc.Run(named("cronjob"), 5)
	return nil
}
