package controlplane

import (
	"fmt"
	"net/url"
	"sync"

	restclient "k8s.io/client-go/rest"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

// Identity is a user a component runs as. The simulator authenticates
// with its admin credentials and impersonates the identity, so the API
// server authorizes and admits every request as it would the component's
// own service account token: RBAC, ValidatingAdmissionPolicies that read
// request.userInfo, and the node name a token bound to a pod carries.
type Identity struct {
	User   string
	Groups []string
	Extra  map[string][]string
}

// Service account token extras (k8s.io/apiserver/pkg/authentication/serviceaccount).
const (
	ExtraNodeName = "authentication.kubernetes.io/node-name"
	ExtraNodeUID  = "authentication.kubernetes.io/node-uid"
)

// ServiceAccount is the identity of a service account's token.
func ServiceAccount(namespace, name string) Identity {
	return Identity{
		User:   fmt.Sprintf("system:serviceaccount:%s:%s", namespace, name),
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
	}
}

// OnNode is the identity of the service account token of a pod on node
// name: the API server adds the node's name and UID to such tokens.
func (id Identity) OnNode(name, uid string) Identity {
	out := Identity{User: id.User, Groups: id.Groups, Extra: map[string][]string{}}
	for k, v := range id.Extra {
		out.Extra[k] = v
	}
	out.Extra[ExtraNodeName] = []string{name}
	if uid != "" {
		out.Extra[ExtraNodeUID] = []string{uid}
	}
	return out
}

// Config returns a copy of admin that acts as the identity.
func (id Identity) Config(admin *restclient.Config) *restclient.Config {
	c := restclient.CopyConfig(admin)
	c.Impersonate = restclient.ImpersonationConfig{UserName: id.User, Groups: id.Groups, Extra: id.Extra}
	return c
}

// The simulated cluster has no Service network: a webhook Service is
// reached at the address its in-process server listens on. Routes are
// process-wide, as the API server's resolver hook is.
// A Service routed by two clusters of one process (a test running
// strata-sim beside its own cluster) goes to the latest, and back to the
// earlier one when the latest goes.
var (
	routesMu      sync.Mutex
	routes        = map[string][]*url.URL{}
	resolverSetUp sync.Once
)

// RouteService makes the API servers of this process reach port of
// Service namespace/name at target (https://127.0.0.1:PORT). The returned
// function removes the route, restoring the one it replaced.
func RouteService(namespace, name string, port int32, target *url.URL) func() {
	key := fmt.Sprintf("%s/%s:%d", namespace, name, port)
	routesMu.Lock()
	routes[key] = append(routes[key], target)
	routesMu.Unlock()
	return func() {
		routesMu.Lock()
		defer routesMu.Unlock()
		stack := routes[key]
		for i := len(stack) - 1; i >= 0; i-- {
			if stack[i] == target {
				stack = append(stack[:i:i], stack[i+1:]...)
				break
			}
		}
		if len(stack) == 0 {
			delete(routes, key)
		} else {
			routes[key] = stack
		}
	}
}

type serviceRoutes struct{}

// ResolveEndpoint implements the API server's webhook service resolver.
func (serviceRoutes) ResolveEndpoint(namespace, name string, port int32) (*url.URL, error) {
	routesMu.Lock()
	defer routesMu.Unlock()
	if stack := routes[fmt.Sprintf("%s/%s:%d", namespace, name, port)]; len(stack) > 0 {
		return stack[len(stack)-1], nil
	}
	return nil, fmt.Errorf("service %s/%s port %d has no endpoint in the simulated cluster", namespace, name, port)
}

// installServiceRoutes points the API server's service resolution at the
// routes; once per process (the hook panics on a second call).
func installServiceRoutes() {
	resolverSetUp.Do(func() { app.SetServiceResolverForTests(serviceRoutes{}) })
}
