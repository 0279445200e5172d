package schedulerargs

// Default gives a weight of 1 to resources whose weight is 0 or absent.
func (a *NodeResourcesFitPlusArgs) Default() {
	for name, r := range a.Resources {
		if r.Weight == 0 {
			r.Weight = 1
			a.Resources[name] = r
		}
	}
}
