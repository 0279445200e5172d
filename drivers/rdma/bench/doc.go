// Package bench measures what joint GPU and RDMA NIC claims cost the
// scheduler's structured allocator, next to GPU-only claims of the same
// size, on clusters of DGX H100 nodes whose ResourceSlices come from the
// real NVIDIA (nvidia.strata.sh) and RDMA (rdma.strata.sh) backends
// reading a fake sysfs. It holds tests only:
//
//	go test ./drivers/rdma/bench/ -run '^$' -bench BenchmarkJointAllocation -benchtime=3x -benchmem
//
// TestJointAllocation checks, on single DGX H100, DGX A100 and HGX H100
// (NICs on CPU root ports) nodes, that switch-matched claims get a GPU and
// the NIC on its PCIe switch, or no allocation where no NIC shares a
// switch with a GPU.
package bench
