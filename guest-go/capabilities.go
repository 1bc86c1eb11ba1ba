package ipam

// Which exported functions a module implements itself (`cni:ipam/capabilities`, for
// `wasm-ipam inspect`): a Go SDK component exports every function of `handler`,
// `inspect`, `nodes`, `reservations` and `usage`, so only the module's type says which
// answers are its own, which are defaults built from them, and which answer "not
// implemented" (code 121).

// Origin is where a function's answer comes from.
type Origin uint8

const (
	// OriginModule is the module's own code.
	OriginModule Origin = iota
	// OriginDerived is a default built from what the module does implement.
	OriginDerived
	// OriginNotImplemented is a default that answers code 121.
	OriginNotImplemented
)

// Function is one exported function, named as in the WIT (`handler.check`).
type Function struct {
	Name   string
	Origin Origin
}

// Capabilities says, for each function m's component exports, where its answer comes
// from: the interfaces m implements make its own.
func Capabilities(m Module) []Function {
	_, lists := m.(AllocationLister)
	_, checks := m.(Checker)
	_, collects := m.(GarbageCollector)
	_, pools := m.(PoolReporter)
	_, usage := m.(UsageReporter)
	_, releases := m.(NodeReleaser)
	_, reserves := m.(Reserver)
	own := func(implemented bool, otherwise Origin) Origin {
		if implemented {
			return OriginModule
		}
		return otherwise
	}
	fromAllocations := OriginNotImplemented
	if lists {
		fromAllocations = OriginDerived
	}
	fromPools := fromAllocations
	if pools {
		fromPools = OriginDerived
	}
	return []Function{
		{"handler.add", OriginModule},
		{"handler.del", OriginModule},
		{"handler.check", own(checks, fromAllocations)},
		{"handler.gc", own(collects, fromAllocations)},
		// A host of 0.2.5 or later answers STATUS itself; the export answers ready.
		{"handler.status", OriginDerived},
		{"inspect.allocations", own(lists, OriginNotImplemented)},
		{"inspect.pools", own(pools, fromAllocations)},
		{"nodes.release-node", own(releases, OriginNotImplemented)},
		{"reservations.reserve", own(reserves, OriginNotImplemented)},
		{"reservations.unreserve", own(reserves, OriginNotImplemented)},
		{"reservations.all", own(reserves, OriginNotImplemented)},
		{"usage.pools", own(usage, fromPools)},
	}
}
