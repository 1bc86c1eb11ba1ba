package ipam

// `wasm-ipam stats` in detail (`cni:ipam/usage`): a row per pool, which the host sums
// into the network's totals, and optionally a row per block of a pool, shown beside
// it and never summed. Asked read-only. Counts saturate at 2^64-1: the Go SDK does not
// export `wide-usage`, whose exact counts only an IPv6 pool past 2^64 addresses needs.

// UsageKind says whether a PoolUsage row is a pool or a block of one.
type UsageKind uint8

const (
	// UsagePool rows partition the network; the host sums them.
	UsagePool UsageKind = iota
	// UsageBlock rows are parts of a pool row (a node's block), never summed.
	UsageBlock
)

// PoolUsage is one pool or block and its use.
type PoolUsage struct {
	Kind UsageKind
	Name string
	// Parent is, for a block, the Name of its pool row.
	Parent *string
	// Node is, for a block, the node it belongs to, if the module has nodes.
	Node *string
	// Capacity is how many addresses it can hand out in all, nil when unknown.
	Capacity *uint64
	// InUse is held by pods, borrowed ones included.
	InUse uint64
	// Excluded is how many of Capacity are never handed out by configuration.
	Excluded uint64
	// CoolingDown is released but not yet handed out again (kept for a sticky pod).
	CoolingDown uint64
	// Reserved is kept out of use by a reservation, and not in use.
	Reserved uint64
	// Borrowed is how many of InUse a node holds in another node's block.
	Borrowed uint64
	// Free is how many can be handed out now, nil when unknown.
	Free *uint64
	// WarnPercent is the percentage of Capacity in use past which the module warns.
	WarnPercent *uint8
}

// UsageReporter is a module's own `stats` rows. Without it, the rows are
// PoolReporter's pools (or their default) as pool rows.
type UsageReporter interface {
	Usage(ctx *Context, store Store) ([]PoolUsage, *Error)
}

// Usage answers m's usage rows: its own, or its pools as pool rows.
func Usage(m Module, ctx *Context, store Store) ([]PoolUsage, *Error) {
	if u, ok := m.(UsageReporter); ok {
		return u.Usage(ctx, store)
	}
	pools, err := Pools(m, ctx, store)
	if err != nil {
		return nil, err
	}
	rows := make([]PoolUsage, len(pools))
	for i, p := range pools {
		rows[i] = PoolUsage{
			Kind: UsagePool, Name: p.Name, Capacity: p.Capacity, InUse: p.InUse,
			Excluded: p.Excluded, CoolingDown: p.CoolingDown, Free: p.Free,
		}
	}
	return rows, nil
}
