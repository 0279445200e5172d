#!/usr/bin/env bash
# Installs what real kubelet nodes need (sim/realnode, docs/real-nodes.md):
# runc, busybox-static and the CNI plugins from Debian; containerd,
# its runc shim and ctr from the Go module proxy; and a kubelet built from
# k8s.io/kubernetes at the version Strata's go.mod pins. The Go-built
# programs land in a cache folder named by their versions, so a second run
# (and every later make test on the same machine) reuses them; the folder
# is printed on the last line.
#
# Usage: hack/realnode/install.sh [CACHE_DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."

CONTAINERD_VERSION=v2.4.2
K8S_VERSION=$(go list -m -f '{{.Version}}' k8s.io/kubernetes)
cache=${1:-${STRATA_REALNODE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/strata/realnode}}
bin="$cache/containerd-$CONTAINERD_VERSION-kubelet-$K8S_VERSION/bin"
mkdir -p "$bin"

log() { echo "realnode-tools: $*" >&2; }

# Debian's packages: the OCI runtime, the images' userland, and the CNI
# plugins containerd needs to call its network ready. (Images are packed
# by sim/realnode itself.)
need=()
command -v runc >/dev/null || need+=(runc)
[ -x /bin/busybox ] || need+=(busybox-static)
[ -x /usr/lib/cni/loopback ] || need+=(containernetworking-plugins)
if [ ${#need[@]} -gt 0 ]; then
	if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
		log "missing ${need[*]} and cannot apt-get them (not root on Debian); real-node tests will skip"
		echo "$bin"
		exit 0
	fi
	log "apt-get install ${need[*]}"
	apt-get update -qq >/dev/null
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

# containerd without the snapshotters that need C libraries; overlayfs and
# native are what the harness uses.
export CGO_ENABLED=0
for cmd in containerd containerd-shim-runc-v2 ctr; do
	if [ ! -x "$bin/$cmd" ]; then
		log "go install $cmd $CONTAINERD_VERSION"
		GOBIN="$bin" go install -tags no_btrfs,no_devmapper,no_zfs \
			"github.com/containerd/containerd/v2/cmd/$cmd@$CONTAINERD_VERSION"
	fi
done

# The kubelet, from Strata's own module (go.mod's tool line) so it is the
# exact Kubernetes the rest of Strata is built on. ContainerLogsDir is a
# relative path: the harness starts each kubelet in its node's folder, so
# the /var/log/containers links land there instead of on the host.
if [ ! -x "$bin/kubelet" ]; then
	log "go build kubelet $K8S_VERSION (about 8 minutes cold on 2 cores)"
	major=${K8S_VERSION#v}; major=${major%%.*}
	minor=${K8S_VERSION#v*.}; minor=${minor%%.*}
	go build -o "$bin/kubelet.tmp" -ldflags "\
-X k8s.io/component-base/version.gitVersion=$K8S_VERSION \
-X k8s.io/component-base/version.gitMajor=$major \
-X k8s.io/component-base/version.gitMinor=$minor \
-X k8s.io/client-go/pkg/version.gitVersion=$K8S_VERSION \
-X k8s.io/kubernetes/pkg/kubelet.ContainerLogsDir=containers" \
		k8s.io/kubernetes/cmd/kubelet
	mv "$bin/kubelet.tmp" "$bin/kubelet"
fi
echo "$bin"
