package rdma

// Probes returns how many health checks WatchHealth has made.
func Probes(b *Backend) int64 { return b.probes.Load() }
