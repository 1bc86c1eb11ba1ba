package ipam

// What a module tells operators (`cni:ipam/inspect`): `wasm-ipam list` shows its
// allocations, `stats` its pools. The host asks read-only (a store write is refused),
// under the lock and with a deadline.

// Allocation is one address handed out.
type Allocation struct {
	// Address alone, without a prefix length: `10.1.2.3`, `fd00::3`.
	Address     string
	ContainerID string
	// Ifname is empty when the module does not know it.
	Ifname string
	// Since is when it was handed out (Unix seconds), nil when the module did not
	// record it.
	Since *uint64
	// Attributes is anything else worth showing (`node`, `pool`), in order.
	Attributes []Attribute
}

// Attribute is one named value of an Allocation.
type Attribute struct {
	Name, Value string
}

// AllocationLister lists every address handed out, for `wasm-ipam list`; the
// defaults of CHECK, GC and the pools are built on it.
type AllocationLister interface {
	Allocations(ctx *Context, store Store) ([]Allocation, *Error)
}

// Pool is one pool of addresses and its use. Counts saturate at 2^64-1.
type Pool struct {
	// Name is how the module names it (`10.1.0.0/24`, a block, a range set).
	Name string
	// Capacity is how many addresses it can hand out in all, nil when unknown.
	Capacity *uint64
	InUse    uint64
	// Excluded is how many of Capacity are never handed out (`exclude`).
	Excluded uint64
	// CoolingDown is released but not yet handed out again.
	CoolingDown uint64
	// Free is how many can be handed out now, nil when unknown.
	Free *uint64
}

// PoolReporter reports the module's pools, for `wasm-ipam stats`. Without it, the
// pools are one named after the network with AllocationLister's count in use and
// capacity unknown.
type PoolReporter interface {
	Pools(ctx *Context, store Store) ([]Pool, *Error)
}

// Allocations answers m's allocations: its own, or code 121.
func Allocations(m Module, ctx *Context, store Store) ([]Allocation, *Error) {
	if l, ok := m.(AllocationLister); ok {
		return l.Allocations(ctx, store)
	}
	return nil, Unsupported("this module does not report allocations")
}

// Pools answers m's pools: its own, or one named after the network with the count of
// its allocations in use.
func Pools(m Module, ctx *Context, store Store) ([]Pool, *Error) {
	if p, ok := m.(PoolReporter); ok {
		return p.Pools(ctx, store)
	}
	held, err := Allocations(m, ctx, store)
	if err != nil {
		return nil, err
	}
	return []Pool{{Name: ctx.NetworkName, InUse: uint64(len(held))}}, nil
}
