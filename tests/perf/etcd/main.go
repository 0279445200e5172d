//go:build perf

// Command etcd is the etcd server that upstream's scheduler benchmark
// harness starts for each workload (it looks for "etcd" on PATH), at the
// version Kubernetes 1.37.2 pins.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
