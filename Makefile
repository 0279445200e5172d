# Strata build and test entry points. See README.md.

GO ?= go
# go-nvml needs cgo; its header marks old NVML calls deprecated, which gcc
# would print on every cold build.
export CGO_ENABLED := 1
export CGO_CFLAGS := -O2 -g -Wno-deprecated-declarations

K8S_VERSION := v1.37.2
LDFLAGS := -X k8s.io/component-base/version.gitVersion=$(K8S_VERSION) \
           -X k8s.io/component-base/version.gitMajor=1 \
           -X k8s.io/component-base/version.gitMinor=37

DEMO_DIR := deployments/examples/demo

# Unit packages run with the race detector; packages that link
# k8s.io/kubernetes (API server, scheduler, controllers) run without it,
# because instrumenting those dependency trees costs many minutes of build
# on a small machine. The end-to-end suite lives in tests/.
ALL_PKGS  = $(shell $(GO) list ./... | grep -v '/tests/')
HEAVY_PKGS = $(shell $(GO) list -f '{{.ImportPath}}{{range .Deps}} {{.}}{{end}}' ./... | grep -v '/tests/' | awk '/ k8s.io\/kubernetes\// {print $$1}')
# The gang plugin links the scheduler framework but not the API server,
# and its concurrency (Permit rounds, timeout timers, informer handlers)
# is worth the race build.
RACE_HEAVY = github.com/strata-sh/strata/scheduler-plugins/gang
RACE_PKGS = $(filter-out $(HEAVY_PKGS),$(ALL_PKGS)) $(RACE_HEAVY)

.PHONY: all build demo demo-real test unit e2e soak realnode realnode-tools fuzz generate verify bench bench-full bench-sim replay replay-framework images clean

all: build

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o bin/ ./cmd/...

## demo: boot the demo cluster, run the demo workloads, print where they landed.
DEMO_WORKLOADS := -f $(DEMO_DIR) -f deployments/examples/nvidia -f deployments/examples/gang -f deployments/examples/rdma/gpu-nic-same-switch.yaml -f deployments/examples/ascend/npu-whole.yaml -f deployments/examples/cambricon/smlu.yaml

demo:
	$(GO) run ./cmd/strata-sim run --cluster $(DEMO_DIR)/cluster.yaml $(DEMO_WORKLOADS) --once --report table

## demo-real: the same workloads on the demo cluster with three real
## nodes (real kubelet and containerd, Strata's plugins from their images
## on simulated machines); the report adds what each of their containers
## saw. Needs root (docs/real-nodes.md).
demo-real: build
	@tools=$$(bash hack/realnode/install.sh) && \
	$(GO) run ./cmd/strata-sim run --cluster $(DEMO_DIR)/cluster-real.yaml $(DEMO_WORKLOADS) --realnode-tools "$$tools" --plugin-bin-dir bin --once --report table

## test: unit tests (race detector where cheap), the end-to-end suite on
## simulated nodes, and the real-node suite (real kubelet and containerd).
test: unit e2e realnode

unit:
	$(GO) test -race -count=1 $(RACE_PKGS)
	$(GO) test -count=1 $(filter-out $(RACE_HEAVY),$(HEAVY_PKGS))

e2e:
	$(GO) test -count=1 -timeout 45m $$($(GO) list ./tests/... | grep -v /tests/realnode)

## soak: the randomized gang soak (TestGangSoak) for SOAK_DURATION on
## SOAK_NODES simulated DGX nodes under a three-tier network, with leader
## failovers, refused and slowed writes and API server restarts on a
## random schedule; prints a summary. Not part of make test, whose e2e
## runs a one-minute version on 8 nodes with the same failovers and faults.
## SOAK_SEED replays a run.
SOAK_DURATION ?= 30m
SOAK_NODES ?= 500
SOAK_SEED ?=

soak:
	@log=$$(mktemp -t strata-soak.XXXXXX); \
	STRATA_SOAK_FAULTS=1 STRATA_SOAK_DURATION=$(SOAK_DURATION) STRATA_SOAK_NODES=$(SOAK_NODES) STRATA_SOAK_SEED=$(SOAK_SEED) \
		$(GO) test -count=1 -timeout 0 -run '^TestGangSoak$$' -v ./tests/e2e > $$log 2>&1; rc=$$?; \
	grep -E '^(=== RUN|--- |\s+gang_soak_test|PASS|FAIL|ok)' $$log; echo "soak log: $$log"; exit $$rc

## realnode-tools: what real nodes run (hack/realnode/install.sh): Debian's
## runc, busybox-static and CNI plugins, containerd and a kubelet built
## once into a cache folder.
realnode-tools:
	bash hack/realnode/install.sh

## realnode: the real-node suite (tests/realnode), timed on its own. It
## skips, saying why, on a machine that cannot run containers.
realnode:
	@tools=$$(bash hack/realnode/install.sh) && start=$$(date +%s) && \
	STRATA_REALNODE_TOOLS="$$tools" $(GO) test -count=1 -timeout 30m ./tests/realnode; rc=$$?; \
	echo "real-node suite: $$(( $$(date +%s) - start )) s"; exit $$rc

## fuzz: every fuzz target of the repository for FUZZTIME each, one at a
## time (temporary files on tmpfs: the checkpoint targets fsync). Not part
## of make test; what a run finds lands under the package's testdata/fuzz.
FUZZTIME ?= 60s

fuzz:
	@for f in $$(grep -rl --include='*_test.go' '^func Fuzz' drivers api scheduler-plugins hardware controller internal); do 	  d=$$(dirname $$f); for n in $$(grep -ho '^func Fuzz[A-Za-z0-9_]*' $$f | cut -c6-); do 	    echo "== $$d $$n"; TMPDIR=/dev/shm $(GO) test ./$$d -run '^$$' -fuzz "^$$n\$$" -fuzztime $(FUZZTIME) || exit 1; 	  done; done

## bench-sim: strata-sim boot time, settle time and peak memory for
## clusters of SIM_BENCH_NODES DGX H100 nodes, one process per size so
## that each peak is its own (docs/benchmarks.md).
SIM_BENCH_NODES ?= 100 1000 2000

bench-sim:
	$(GO) test -c -o bin/e2e.test ./tests/e2e
	cd tests/e2e && for n in $(SIM_BENCH_NODES); do \
		STRATA_BENCH_NODES=$$n ../../bin/e2e.test -test.run XXX -test.bench BenchmarkSimScale -test.benchtime 1x -test.timeout 60m || exit 1; \
	done

## bench: upstream Kubernetes' scheduler benchmarks (scheduler_perf,
## v1.37.2, its workload files unchanged in tests/perf/testdata/upstream)
## and Strata's own, each test case with the plain kube-scheduler profile
## and with Strata's shipped one in the same invocation, PERF_COUNT rounds
## (each round runs every workload once, plain then Strata in odd rounds
## and Strata then plain in even ones, so that drift over the run favours
## neither); prints the table of docs/benchmarks.md. PERF_WORKLOADS picks the
## workloads (a regular expression on <test case>/<workload>); bench-full
## runs every workload labelled performance of every suite (hours).
## Strata's own workloads are in tests/perf/testdata/strata. The harness
## starts etcd from PATH: bin/etcd, the
## version Kubernetes 1.37.2 pins, is built first.
PERF_SUITES ?= upstream/dra,upstream/podgroup,upstream/workload_preemption,strata
PERF_WORKLOADS ?= SchedulingWithResourceClaimTemplate/2000pods_200nodes|(Partitionable|ConsumableCapacity)/empty_100nodes|ExtendedResource/Explicit_25classes_2000pods_200nodes|(GangScheduling|TopologyAwareScheduling)/100Nodes_10Gangs|GangPreemption(Basic|PodGroups)/100Nodes_1PreemptorGang_.*|Strata.*/(128|64)nodes_.*
PERF_COUNT ?= 5
PERF_OUT ?= out/perf
PERF_LABELS ?=

bench:
	$(GO) build -tags perf -o bin/etcd ./tests/perf/etcd
	$(GO) test -c -tags perf -o bin/perf.test ./tests/perf
	rm -rf $(PERF_OUT) && mkdir -p $(PERF_OUT)
	cd tests/perf && for round in $$(seq $(PERF_COUNT)); do \
		log=$(abspath $(PERF_OUT))/bench-$$round.log; \
		PATH=$(CURDIR)/bin:$$PATH ../../bin/perf.test -test.run '^$$' -test.bench BenchmarkPerfScheduling \
			-test.benchtime 1x -test.count 1 -test.timeout 0 -perf-scheduling-label-filter='$(PERF_LABELS)' \
			-data-items-dir $(abspath $(PERF_OUT)) -strata-suites $(PERF_SUITES) -strata-workloads '$(PERF_WORKLOADS)' \
			-strata-first=$$([ $$((round % 2)) = 0 ] && echo true || echo false) > $$log 2>&1 \
			|| { grep -E -- '--- FAIL|FAIL|Error running' $$log | head -20; exit 1; }; \
	done
	$(GO) run ./tests/perf/perftable $(PERF_OUT) | tee $(PERF_OUT)/table.txt

bench-full:
	$(MAKE) bench PERF_WORKLOADS=.* PERF_LABELS=performance PERF_OUT=out/perf-full

## replay: Alibaba's openb GPU-sharing traces in their authors' protocol,
## seeds 42-51 (docs/scoring.md), model engine: every published variant
## and the ones derived beyond their ranges (cpu250, gpuspec25/33,
## gpushare80/100, multigpu40/50, made from the default list as the
## trace's description makes the published ones). TRACE_DIR holds the
## openb CSV files (clusterdata, cluster-trace-gpu-v2023).
TRACE_DIR ?= ../shared/data/openb
REPLAY_OUT ?= out/replay

replay:
	$(GO) run ./cmd/strata-sim replay --trace-dir $(TRACE_DIR) --variant all,beyond --out $(REPLAY_OUT)

## replay-framework: the same protocol through kube-scheduler's framework
## and the DRA allocator, with Strata's profile and two baselines
## (kube-scheduler's default scoring and MostAllocated) on the same
## samples, the table of docs/benchmarks.md; one variant at a time
## (REPLAY_VARIANT: a published one or a derived one such as cpu250). At
## the shipped search share ten seeds of Strata's profile alone take
## 32 to 40 minutes on a 2-core machine for the default variant; with
## REPLAY_NODES_TO_SCORE=10 the three profiles take about 19 (31 for
## gpushare60). Most of it is the Kubernetes 1.37 DRA allocator
## (docs/scoring.md, "Replay speed").
REPLAY_VARIANT ?= default
REPLAY_PROFILES ?= strata,default,mostallocated
REPLAY_SEEDS ?= 42-51
# REPLAY_NODES_TO_SCORE sets percentageOfNodesToScore for every profile:
# empty (the default) keeps each profile's own, kube-scheduler's adaptive
# share for all three as shipped (41 % of openb's nodes); 10 searches
# less, 100 scores every node as the trace authors' simulator does.
REPLAY_NODES_TO_SCORE ?=
# REPLAY_UNTIL stops each seed once arrivals reach that percent of the
# GPUs (100 to 130): the figure at 100 % is the same, the curve ends
# there, and the pods that would only fail are not tried.
REPLAY_UNTIL ?= 100

replay-framework:
	$(GO) run ./cmd/strata-sim replay --engine framework --trace-dir $(TRACE_DIR) --variant $(REPLAY_VARIANT) --profile $(REPLAY_PROFILES) --seeds $(REPLAY_SEEDS) --until $(REPLAY_UNTIL) $(if $(REPLAY_NODES_TO_SCORE),--percentage-of-nodes-to-score $(REPLAY_NODES_TO_SCORE)) --out $(REPLAY_OUT)-framework-$(REPLAY_VARIANT)$(if $(REPLAY_NODES_TO_SCORE),-$(REPLAY_NODES_TO_SCORE))

## images: one container image per component (Dockerfile targets).
CONTAINER_TOOL ?= docker
IMAGE_REGISTRY ?= ghcr.io/strata-sh
IMAGE_TAG ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
IMAGES := strata-scheduler strata-controller nvidia-kubelet-plugin rdma-kubelet-plugin ascend-kubelet-plugin cambricon-kubelet-plugin

images:
	for i in $(IMAGES); do \
		$(CONTAINER_TOOL) build --target $$i --build-arg LDFLAGS="$(LDFLAGS)" -t $(IMAGE_REGISTRY)/$$i:$(IMAGE_TAG) . || exit 1; \
	done

CONTROLLER_GEN := $(GO) run sigs.k8s.io/controller-tools/cmd/controller-gen@v0.23.0

## generate: deepcopy code of the API types and CRD manifests.
generate:
	$(CONTROLLER_GEN) object paths=./api/...
	$(CONTROLLER_GEN) crd paths=./api/scheduling/... paths=./api/topology/... output:crd:artifacts:config=deployments/helm/strata/crds

## verify: formatting, vet, module tidiness, generated code up to date.
verify: generate
	@git diff --exit-code -- api deployments/helm/strata/crds || (echo "generated code is out of date: run make generate and commit"; exit 1)
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) mod tidy -diff

clean:
	rm -rf bin
