//go:build !wasip1

package ipam

// reported is what Degraded last reported in a native test, nil when nothing since the
// last LastReported.
var reported []Error

func reportDegraded(conditions []Error) { reported = conditions }

// LastReported is, in a native test, what the last Degraded reported (an empty list
// when it cleared, nil when Degraded was not called since the last LastReported),
// and forgets it, so the next check sees only what comes after.
func LastReported() []Error {
	r := reported
	reported = nil
	return r
}
