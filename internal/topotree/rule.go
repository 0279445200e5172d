package topotree

// Strategy says how strongly a gang wants to stay inside one domain of a
// layer.
type Strategy string

// Gather strategies.
const (
	// MustGather: all pods of the gang in one domain of the layer, or none
	// placed.
	MustGather Strategy = "MustGather"
	// PreferGather: one domain of the layer if any can hold the gang,
	// otherwise spread over as few as possible.
	PreferGather Strategy = "PreferGather"
)

// Rule is a gang's requirement for one layer. The gang-annotation parser
// produces rules and the scheduler's placement honours them.
type Rule struct {
	Layer    string
	Strategy Strategy
	// PodCountMultiple, if above 1, makes the number of pods in each
	// domain of the layer a multiple of it, unless one domain holds the
	// whole gang.
	PodCountMultiple int
}
