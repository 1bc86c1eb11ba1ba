//go:build wasip1

package ipam

// The component's optional exports: `inspect`, `nodes`, `reservations`, `usage` and
// `capabilities`. Each lifts its context (flattened into parameters: the network
// name, the config option, the node name and the instant), runs the registered
// module's implementation or the SDK's default, and lowers its answer into pinned
// memory, which the function's post-return unpins once the host has read it.

import "unsafe"

// stringAt copies the string of n bytes at p.
func stringAt(p, n uint32) string {
	if n == 0 {
		return ""
	}
	return string(unsafe.Slice((*byte)(at(p)), n))
}

// liftContext is the context record from its flattened parameters; the blocks the
// host allocated for its strings are unpinned, and the call's memory limit set from
// its config.
func liftContext(nameP, nameN, hasConfig, configP, configN, nodeP, nodeN uint32, seconds uint64, nanoseconds uint32) *Context {
	ctx := &Context{
		NetworkName: stringAt(nameP, nameN),
		NodeName:    stringAt(nodeP, nodeN),
		Now:         WallInstant{Seconds: seconds, Nanoseconds: nanoseconds},
	}
	if hasConfig != 0 {
		config := stringAt(configP, configN)
		ctx.Config = &config
		beginConfig(config)
	}
	release(0)
	return ctx
}

func store64(p uint32, v uint64)  { *(*uint64)(at(p)) = v }
func lowerU64(p uint32, v uint64) { store64(p, v) }

// lowerListReturn writes result<list<T>, error> into a pinned return area.
func lowerListReturn[T any](items []T, size uint32, lower func(uint32, T), e *Error) uint32 {
	return lowerResult(listResultSize, payload4, &items, e, func(p uint32, items []T) {
		lowerList(p, size, items, lower)
	})
}

func lowerAllocation(p uint32, a Allocation) {
	stringRef(p+allocationAddress, a.Address)
	stringRef(p+allocationContainerID, a.ContainerID)
	stringRef(p+allocationIfname, a.Ifname)
	lowerOption(p+allocationSince, payload8, a.Since, lowerU64)
	lowerList(p+allocationAttributes, attributeSize, a.Attributes, func(e uint32, attr Attribute) {
		stringRef(e+attributeName, attr.Name)
		stringRef(e+attributeValue, attr.Value)
	})
}

func lowerPool(p uint32, pool Pool) {
	stringRef(p+poolName, pool.Name)
	lowerOption(p+poolCapacity, payload8, pool.Capacity, lowerU64)
	store64(p+poolInUse, pool.InUse)
	store64(p+poolExcluded, pool.Excluded)
	store64(p+poolCoolingDown, pool.CoolingDown)
	lowerOption(p+poolFree, payload8, pool.Free, lowerU64)
}

func lowerPoolUsage(p uint32, u PoolUsage) {
	store8(p+poolUsageKind, uint8(u.Kind))
	stringRef(p+poolUsageName, u.Name)
	lowerOption(p+poolUsageParent, payload4, u.Parent, stringRef)
	lowerOption(p+poolUsageNode, payload4, u.Node, stringRef)
	lowerOption(p+poolUsageCapacity, payload8, u.Capacity, lowerU64)
	store64(p+poolUsageInUse, u.InUse)
	store64(p+poolUsageExcluded, u.Excluded)
	store64(p+poolUsageCoolingDown, u.CoolingDown)
	store64(p+poolUsageReserved, u.Reserved)
	store64(p+poolUsageBorrowed, u.Borrowed)
	lowerOption(p+poolUsageFree, payload8, u.Free, lowerU64)
	lowerOption(p+poolUsageWarnPercent, payload1, u.WarnPercent, lowerU8)
}

func lowerReservation(p uint32, r Reservation) {
	stringRef(p+reservationCIDR, r.CIDR)
	stringRef(p+reservationNote, r.Note)
	store64(p+reservationSince, r.Since)
	lowerStrings(p+reservationHeld, r.Held)
}

// lowerReservationReturn writes result<reservation, error> into a pinned return area.
func lowerReservationReturn(r *Reservation, e *Error) uint32 {
	return lowerResult(reservationReturnSize, reservationReturnPayload, r, e, lowerReservation)
}

//go:wasmexport cni:ipam/inspect@0.2.5#allocations
func exportAllocations(nameP, nameN, hasConfig, configP, configN, nodeP, nodeN uint32, seconds uint64, nanoseconds uint32) uint32 {
	ctx := liftContext(nameP, nameN, hasConfig, configP, configN, nodeP, nodeN, seconds, nanoseconds)
	held, err := Allocations(exported(), ctx, HostStore{})
	return lowerListReturn(held, allocationSize, lowerAllocation, err)
}

//go:wasmexport cni:ipam/inspect@0.2.5#pools
func exportPools(nameP, nameN, hasConfig, configP, configN, nodeP, nodeN uint32, seconds uint64, nanoseconds uint32) uint32 {
	ctx := liftContext(nameP, nameN, hasConfig, configP, configN, nodeP, nodeN, seconds, nanoseconds)
	pools, err := Pools(exported(), ctx, HostStore{})
	return lowerListReturn(pools, poolSize, lowerPool, err)
}

//go:wasmexport cni:ipam/usage@0.2.5#pools
func exportUsage(nameP, nameN, hasConfig, configP, configN, nodeP, nodeN uint32, seconds uint64, nanoseconds uint32) uint32 {
	ctx := liftContext(nameP, nameN, hasConfig, configP, configN, nodeP, nodeN, seconds, nanoseconds)
	rows, err := Usage(exported(), ctx, HostStore{})
	return lowerListReturn(rows, poolUsageSize, lowerPoolUsage, err)
}

//go:wasmexport cni:ipam/nodes@0.2.5#release-node
func exportReleaseNode(nameP, nameN, hasConfig, configP, configN, nodeP, nodeN uint32, seconds uint64, nanoseconds uint32, releasedP, releasedN, dryRun uint32) uint32 {
	node := stringAt(releasedP, releasedN)
	ctx := liftContext(nameP, nameN, hasConfig, configP, configN, nodeP, nodeN, seconds, nanoseconds)
	report, err := ReleaseNode(exported(), ctx, node, dryRun != 0, HostStore{})
	return lowerResult(releaseNodeReturnSize, payload4, report, err, lowerReleaseReport)
}

func lowerReleaseReport(p uint32, report ReleaseReport) {
	lowerList(p+releaseReportAddresses, releasedAddressSize, report.Addresses, func(e uint32, a ReleasedAddress) {
		stringRef(e+releasedAddressAddress, a.Address)
		stringRef(e+releasedAddressContainerID, a.ContainerID)
		stringRef(e+releasedAddressIfname, a.Ifname)
	})
	lowerStrings(p+releaseReportBlocks, report.Blocks)
	lowerStrings(p+releaseReportNotes, report.Notes)
}

//go:wasmexport cni:ipam/reservations@0.2.5#reserve
func exportReserve(nameP, nameN, hasConfig, configP, configN, nodeP, nodeN uint32, seconds uint64, nanoseconds uint32, cidrP, cidrN, noteP, noteN, force uint32) uint32 {
	cidr, note := stringAt(cidrP, cidrN), stringAt(noteP, noteN)
	ctx := liftContext(nameP, nameN, hasConfig, configP, configN, nodeP, nodeN, seconds, nanoseconds)
	return lowerReservationReturn(Reserve(exported(), ctx, cidr, note, force != 0, HostStore{}))
}

//go:wasmexport cni:ipam/reservations@0.2.5#unreserve
func exportUnreserve(nameP, nameN, hasConfig, configP, configN, nodeP, nodeN uint32, seconds uint64, nanoseconds uint32, cidrP, cidrN uint32) uint32 {
	cidr := stringAt(cidrP, cidrN)
	ctx := liftContext(nameP, nameN, hasConfig, configP, configN, nodeP, nodeN, seconds, nanoseconds)
	return lowerReservationReturn(Unreserve(exported(), ctx, cidr, HostStore{}))
}

//go:wasmexport cni:ipam/reservations@0.2.5#all
func exportReservations(nameP, nameN, hasConfig, configP, configN, nodeP, nodeN uint32, seconds uint64, nanoseconds uint32) uint32 {
	ctx := liftContext(nameP, nameN, hasConfig, configP, configN, nodeP, nodeN, seconds, nanoseconds)
	all, err := Reservations(exported(), ctx, HostStore{})
	return lowerListReturn(all, reservationSize, lowerReservation, err)
}

//go:wasmexport cni:ipam/capabilities@0.2.5#functions
func exportFunctions() uint32 {
	ret, _ := alloc(functionsReturnSize)
	lowerList(ret, functionSize, Capabilities(exported()), func(p uint32, f Function) {
		stringRef(p+functionName, f.Name)
		store8(p+functionOrigin, uint8(f.Origin))
	})
	return ret
}

//go:wasmexport cabi_post_cni:ipam/inspect@0.2.5#allocations
func postAllocations(uint32) { release(0) }

//go:wasmexport cabi_post_cni:ipam/inspect@0.2.5#pools
func postPools(uint32) { release(0) }

//go:wasmexport cabi_post_cni:ipam/usage@0.2.5#pools
func postUsage(uint32) { release(0) }

//go:wasmexport cabi_post_cni:ipam/nodes@0.2.5#release-node
func postReleaseNode(uint32) { release(0) }

//go:wasmexport cabi_post_cni:ipam/reservations@0.2.5#reserve
func postReserve(uint32) { release(0) }

//go:wasmexport cabi_post_cni:ipam/reservations@0.2.5#unreserve
func postUnreserve(uint32) { release(0) }

//go:wasmexport cabi_post_cni:ipam/reservations@0.2.5#all
func postReservations(uint32) { release(0) }

//go:wasmexport cabi_post_cni:ipam/capabilities@0.2.5#functions
func postFunctions(uint32) { release(0) }
