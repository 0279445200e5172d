# syntax=docker/dockerfile:1
#
# Strata's images, one per component, from one build stage:
#
#   docker build --target nvidia-kubelet-plugin -t strata/nvidia-kubelet-plugin .
#
# `make images` builds all of them. go-nvml needs cgo (it loads
# libnvidia-ml.so at run time from the driver the node has, mounted into
# the plugin's pod), so the runtime images are glibc-based distroless.

ARG GO_VERSION=1.26

FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
# The Kubernetes version the scheduler reports; make images passes the
# Makefile's.
ARG LDFLAGS=""
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=1 CGO_CFLAGS="-O2 -g -Wno-deprecated-declarations" \
    go build -trimpath -ldflags "${LDFLAGS}" -o /out/ \
        ./cmd/strata-scheduler ./cmd/strata-controller ./cmd/nvidia-kubelet-plugin ./cmd/rdma-kubelet-plugin ./cmd/ascend-kubelet-plugin \
        ./cmd/cambricon-kubelet-plugin

# kube-scheduler with Strata's plugins; needs no privileges.
FROM gcr.io/distroless/base-debian12:nonroot AS strata-scheduler
COPY --from=build /out/strata-scheduler /usr/bin/strata-scheduler
ENTRYPOINT ["/usr/bin/strata-scheduler"]

# strata-controller; needs no privileges.
FROM gcr.io/distroless/base-debian12:nonroot AS strata-controller
COPY --from=build /out/strata-controller /usr/bin/strata-controller
ENTRYPOINT ["/usr/bin/strata-controller"]

# The NVIDIA kubelet plugin runs as root: it serves sockets in kubelet's
# plugin directories, writes CDI specs, and drives the GPUs through the
# driver's library and tools, which its DaemonSet mounts from the host
# (--nvidia-smi and --mps-control name them there).
FROM gcr.io/distroless/base-debian12 AS nvidia-kubelet-plugin
COPY --from=build /out/nvidia-kubelet-plugin /usr/bin/nvidia-kubelet-plugin
ENTRYPOINT ["/usr/bin/nvidia-kubelet-plugin"]

# The RDMA kubelet plugin runs as root on the host network with
# CAP_NET_ADMIN: it reads sysfs, writes CDI specs, and sets SR-IOV virtual
# function parameters through their physical function over netlink.
FROM gcr.io/distroless/base-debian12 AS rdma-kubelet-plugin
COPY --from=build /out/rdma-kubelet-plugin /usr/bin/rdma-kubelet-plugin
ENTRYPOINT ["/usr/bin/rdma-kubelet-plugin"]

# The Ascend kubelet plugin runs as root: it writes CDI specs and creates
# and destroys vNPUs with the host's npu-smi, which its DaemonSet mounts
# with the driver root.
FROM gcr.io/distroless/base-debian12 AS ascend-kubelet-plugin
COPY --from=build /out/ascend-kubelet-plugin /usr/bin/ascend-kubelet-plugin
ENTRYPOINT ["/usr/bin/ascend-kubelet-plugin"]

# The Cambricon kubelet plugin runs as root: it writes CDI specs and creates
# and destroys sMLUs with the host's cnmon, which its DaemonSet mounts.
FROM gcr.io/distroless/base-debian12 AS cambricon-kubelet-plugin
COPY --from=build /out/cambricon-kubelet-plugin /usr/bin/cambricon-kubelet-plugin
ENTRYPOINT ["/usr/bin/cambricon-kubelet-plugin"]
