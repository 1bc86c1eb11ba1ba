//go:build wasip1

package ipam

// The optional exports in the memory they work on: each lifts a context the host
// wrote through cabi_realloc, and what it lowers reads back the same after the
// collector has run, until its post-return unpins it all.

import (
	"fmt"
	"reflect"
	"testing"
)

type reporting struct{}

func (reporting) Add(*Request, Store) (*Result, *Error) { return nil, nil }
func (reporting) Del(*Request, Store) *Error            { return nil }

func sampleAllocations() []Allocation {
	var out []Allocation
	for i := range 30 {
		a := Allocation{
			Address:     dynamic(fmt.Sprintf("10.1.%d.%d", i/200, i%200)),
			ContainerID: dynamic(fmt.Sprintf("ctr-%d", i)),
			Ifname:      dynamic("eth0"),
			Attributes:  []Attribute{}, // as a list lifts back
		}
		if i%2 == 0 {
			a.Since = Some(uint64(1_700_000_000 + i))
			a.Attributes = []Attribute{{dynamic("node"), dynamic("node-a")}, {dynamic("pool"), dynamic(fmt.Sprint(i))}}
		}
		out = append(out, a)
	}
	return out
}

func sampleUsage() []PoolUsage {
	return []PoolUsage{
		{Kind: UsagePool, Name: dynamic("pool default 10.80.0.0/16"), Capacity: Some(uint64(62_464)), InUse: 3,
			Excluded: 4, CoolingDown: 5, Reserved: 2, Borrowed: 1, Free: Some(uint64(62_450)), WarnPercent: Some(uint8(90))},
		{Kind: UsageBlock, Name: dynamic("10.80.0.0/26"), Parent: Some(dynamic("pool default 10.80.0.0/16")),
			Node: Some(dynamic("node-a")), InUse: 1<<64 - 1},
	}
}

func (reporting) Allocations(ctx *Context, _ Store) ([]Allocation, *Error) {
	if ctx.NetworkName != "net" || ctx.NodeName != "node-a" || ctx.Config == nil || *ctx.Config != `{"name":"net"}` ||
		ctx.Now != (WallInstant{1_700_000_000, 7}) {
		return nil, NewError(150, "context lifted as %+v", ctx)
	}
	return sampleAllocations(), nil
}

func (reporting) Usage(*Context, Store) ([]PoolUsage, *Error) { return sampleUsage(), nil }

func (reporting) ReleaseNode(_ *Context, node string, dryRun bool, _ Store) (*ReleaseReport, *Error) {
	return &ReleaseReport{
		Addresses: []ReleasedAddress{{dynamic("10.80.0.5"), dynamic("c1"), dynamic("eth0")}},
		Blocks:    []string{dynamic("10.80.0.0/26")},
		Notes:     []string{dynamic(fmt.Sprintf("released %s, dry run %v", node, dryRun))},
	}, nil
}

func liftAllocation(p uint32) Allocation {
	return Allocation{
		Address:     liftString(p + allocationAddress),
		ContainerID: liftString(p + allocationContainerID),
		Ifname:      liftString(p + allocationIfname),
		Since:       liftOption(p+allocationSince, payload8, load64),
		Attributes: liftList(p+allocationAttributes, attributeSize, func(e uint32) Attribute {
			return Attribute{liftString(e + attributeName), liftString(e + attributeValue)}
		}),
	}
}

func liftPoolUsage(p uint32) PoolUsage {
	return PoolUsage{
		Kind: UsageKind(load8(p + poolUsageKind)), Name: liftString(p + poolUsageName),
		Parent: liftOption(p+poolUsageParent, payload4, liftString), Node: liftOption(p+poolUsageNode, payload4, liftString),
		Capacity: liftOption(p+poolUsageCapacity, payload8, load64), InUse: load64(p + poolUsageInUse),
		Excluded: load64(p + poolUsageExcluded), CoolingDown: load64(p + poolUsageCoolingDown),
		Reserved: load64(p + poolUsageReserved), Borrowed: load64(p + poolUsageBorrowed),
		Free: liftOption(p+poolUsageFree, payload8, load64), WarnPercent: liftOption(p+poolUsageWarnPercent, payload1, load8),
	}
}

// hostContext is the flattened context the host passes, its strings in blocks of
// cabi_realloc's.
func hostContext() (nameP, nameN, hasConfig, configP, configN, nodeP, nodeN uint32, seconds uint64, nanoseconds uint32) {
	pair := cabiRealloc(0, 0, 4, 24)
	hostString(pair, "net")
	hostString(pair+8, `{"name":"net"}`)
	hostString(pair+16, "node-a")
	return load32(pair), load32(pair + 4), 1, load32(pair + 8), load32(pair + 12), load32(pair + 16), load32(pair + 20), 1_700_000_000, 7
}

func TestTheOptionalExportsAnswersSurviveACollectionUntilPostReturn(t *testing.T) {
	release(0)
	registered = reporting{}
	defer func() { registered = nil }()

	ret := exportAllocations(hostContext())
	churn()
	if load8(ret) != 0 {
		t.Fatalf("allocations failed: %+v", liftError(ret+payload4))
	}
	if got := liftList(ret+payload4, allocationSize, liftAllocation); !reflect.DeepEqual(got, sampleAllocations()) {
		t.Errorf("allocations lifted back:\n%+v\nwant\n%+v", got, sampleAllocations())
	}
	postAllocations(ret)

	ret = exportUsage(hostContext())
	churn()
	if got := liftList(ret+payload4, poolUsageSize, liftPoolUsage); load8(ret) != 0 || !reflect.DeepEqual(got, sampleUsage()) {
		t.Errorf("usage lifted back:\n%+v\nwant\n%+v", got, sampleUsage())
	}
	postUsage(ret)

	// inspect.pools defaults to one pool of the allocations' count.
	ret = exportPools(hostContext())
	churn()
	pool := ret + payload4
	if load8(ret) != 0 || load32(pool+4) != 1 {
		t.Fatalf("pools answered %d, %d rows", load8(ret), load32(pool+4))
	}
	row := load32(pool)
	if liftString(row+poolName) != "net" || load64(row+poolInUse) != 30 || load8(row+poolCapacity) != 0 {
		t.Errorf("pool row: %q, %d in use", liftString(row+poolName), load64(row+poolInUse))
	}
	postPools(ret)

	name, nameN, hasConfig, configP, configN, nodeP, nodeN, seconds, nanos := hostContext()
	released := cabiRealloc(0, 0, 4, 8)
	hostString(released, "node-gone")
	ret = exportReleaseNode(name, nameN, hasConfig, configP, configN, nodeP, nodeN, seconds, nanos, load32(released), load32(released+4), 1)
	churn()
	report := ret + payload4
	notes := liftList(report+releaseReportNotes, 8, liftString)
	addresses := liftList(report+releaseReportAddresses, releasedAddressSize, func(e uint32) ReleasedAddress {
		return ReleasedAddress{liftString(e + releasedAddressAddress), liftString(e + releasedAddressContainerID), liftString(e + releasedAddressIfname)}
	})
	if load8(ret) != 0 || !reflect.DeepEqual(notes, []string{"released node-gone, dry run true"}) ||
		!reflect.DeepEqual(addresses, []ReleasedAddress{{"10.80.0.5", "c1", "eth0"}}) ||
		!reflect.DeepEqual(liftList(report+releaseReportBlocks, 8, liftString), []string{"10.80.0.0/26"}) {
		t.Errorf("release report lifted back: %v %+v", notes, addresses)
	}
	postReleaseNode(ret)

	// Reservations are not the module's: code 121, lowered past the reservation's
	// alignment.
	ret = exportReservations(hostContext())
	if e := liftError(ret + payload4); load8(ret) != 1 || e.Code != CodeNotImplemented {
		t.Errorf("reservations of a module without them: %+v", e)
	}
	postReservations(ret)
	name, nameN, hasConfig, configP, configN, nodeP, nodeN, seconds, nanos = hostContext()
	ret = exportUnreserve(name, nameN, hasConfig, configP, configN, nodeP, nodeN, seconds, nanos, 0, 0)
	if e := liftError(ret + reservationReturnPayload); load8(ret) != 1 || e.Code != CodeNotImplemented {
		t.Errorf("unreserve of a module without reservations: %+v", e)
	}
	postUnreserve(ret)

	ret = exportFunctions()
	churn()
	functions := liftList(ret, functionSize, func(e uint32) Function {
		return Function{liftString(e + functionName), Origin(load8(e + functionOrigin))}
	})
	if !reflect.DeepEqual(functions, Capabilities(reporting{})) {
		t.Errorf("functions lifted back: %+v", functions)
	}
	postFunctions(ret)
	if len(pinned) != 0 {
		t.Errorf("post-return left %d blocks pinned", len(pinned))
	}
}
