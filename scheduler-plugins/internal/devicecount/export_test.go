package devicecount

// SetWalkFrom sets how many shared devices with consumed capacity it
// takes for a tracker to walk the claims, so that tests can drive it
// across the bar.
func SetWalkFrom(a *Allocated, n int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.walkFrom = n
}

// Walking says whether the tracker walks the claims.
func Walking(a *Allocated) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.walking
}
