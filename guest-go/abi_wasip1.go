//go:build wasip1

package ipam

// The canonical ABI glue: how the values of types.go are read from (lifted) and
// written to (lowered) linear memory, as the component model lays them out for
// `cni:ipam@0.2.5`. Every offset below is one of contract.golden's, which
// contract_test.go checks against these constants and the integration suite checks
// against wit/ipam.wit; the round trip through the real host
// (tests/integration/go_sdk.rs) checks the rest.
//
// Memory the host may still read or write is pinned: Go's collector does not see a
// pointer held as an i32, so every block handed to the host (cabi_realloc's, a return
// area, the strings and lists of a result) is kept in `pinned` until the host is done
// with it: after the lifting of an import's answer, after an export's parameters are
// lifted, or at the export's post-return.

import (
	"runtime"
	"unsafe"
)

// pinned holds every block the host may still use, in order of allocation.
var pinned []any

// mark is where the blocks pinned from now on begin; release(mark) unpins them.
func mark() int { return len(pinned) }

func release(from int) {
	clear(pinned[from:])
	pinned = pinned[:from]
}

// alloc returns a zeroed, pinned block of n bytes aligned to 8 (the largest alignment
// of the canonical ABI) and its address.
func alloc(n uint32) (uint32, []byte) {
	if n == 0 {
		return 8, nil
	}
	words := make([]uint64, (n+7)/8)
	pinned = append(pinned, words)
	block := unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), n)
	return addrOf(unsafe.Pointer(&words[0])), block
}

// cabiRealloc is how the host allocates in the module's memory (the strings and lists
// of a request, or of an import's answer). Blocks are pinned until the glue has
// lifted what the host wrote into them.
//
//go:wasmexport cabi_realloc
func cabiRealloc(oldPtr, oldSize, align, newSize uint32) uint32 {
	p, block := alloc(newSize)
	if oldPtr != 0 && oldSize != 0 {
		copy(block, unsafe.Slice((*byte)(at(oldPtr)), min(oldSize, newSize)))
	}
	return p
}

func addrOf(p unsafe.Pointer) uint32 { return uint32(uintptr(p)) }

// at is the Go pointer to linear-memory address p.
func at(p uint32) unsafe.Pointer { return unsafe.Add(unsafe.Pointer(nil), uintptr(p)) }

func load8(p uint32) uint8       { return *(*uint8)(at(p)) }
func load32(p uint32) uint32     { return *(*uint32)(at(p)) }
func load64(p uint32) uint64     { return *(*uint64)(at(p)) }
func store8(p uint32, v uint8)   { *(*uint8)(at(p)) = v }
func store32(p uint32, v uint32) { *(*uint32)(at(p)) = v }

// liftString copies the string whose (pointer, length) is at p.
func liftString(p uint32) string {
	ptr, n := load32(p), load32(p+4)
	if n == 0 {
		return ""
	}
	return string(unsafe.Slice((*byte)(at(ptr)), n))
}

// liftBytes copies the list<u8> whose (pointer, length) is at p.
func liftBytes(p uint32) []byte {
	ptr, n := load32(p), load32(p+4)
	out := make([]byte, n)
	if n > 0 {
		copy(out, unsafe.Slice((*byte)(at(ptr)), n))
	}
	return out
}

// liftList lifts the list whose (pointer, length) is at p, its elements `size` bytes
// apart, each by lift.
func liftList[T any](p, size uint32, lift func(uint32) T) []T {
	ptr, n := load32(p), load32(p+4)
	out := make([]T, n)
	for i := range n {
		out[i] = lift(ptr + i*size)
	}
	return out
}

// liftOption lifts option<T> at p, whose payload is at p+payload.
func liftOption[T any](p, payload uint32, lift func(uint32) T) *T {
	if load8(p) == 0 {
		return nil
	}
	v := lift(p + payload)
	return &v
}

// stringRef writes s's (pointer, length) at p, pinning s until release.
func stringRef(p uint32, s string) {
	pinned = append(pinned, s)
	store32(p, addrOf(unsafe.Pointer(unsafe.StringData(s))))
	store32(p+4, uint32(len(s)))
}

// lowerList writes a pinned block of len(items) elements of `size` bytes, each by
// lower, and its (pointer, length) at p.
func lowerList[T any](p, size uint32, items []T, lower func(uint32, T)) {
	at, _ := alloc(size * uint32(len(items)))
	for i, item := range items {
		lower(at+uint32(i)*size, item)
	}
	store32(p, at)
	store32(p+4, uint32(len(items)))
}

// lowerOption writes option<T> at p, its payload at p+payload.
func lowerOption[T any](p, payload uint32, v *T, lower func(uint32, T)) {
	if v == nil {
		store8(p, 0)
		return
	}
	store8(p, 1)
	lower(p+payload, *v)
}

// ---- the records of cni:ipam/types ----

// request: size 96, align 8.

func liftRequest(p uint32) Request {
	return Request{
		Command:     Command(load8(p + requestCommand)),
		ContainerID: liftString(p + requestContainerID),
		Netns:       liftString(p + requestNetns),
		Ifname:      liftString(p + requestIfname),
		Args: liftList(p+requestArgs, argSize, func(e uint32) Arg {
			return Arg{liftString(e + argKey), liftString(e + argValue)}
		}),
		NetworkName: liftString(p + requestNetworkName),
		CNIVersion:  liftString(p + requestCNIVersion),
		Config:      liftString(p + requestConfig),
		PrevResult:  liftOption(p+requestPrevResult, payload4, liftString),
		LockGrantedAt: WallInstant{
			Seconds:     load64(p + requestLockGrantedAt + wallInstantSeconds),
			Nanoseconds: load32(p + requestLockGrantedAt + wallInstantNanoseconds),
		},
		NodeName: liftString(p + requestNodeName),
	}
}

func liftAttachment(p uint32) Attachment {
	return Attachment{liftString(p + attachmentContainerID), liftString(p + attachmentIfname)}
}

func lowerU32(p uint32, v uint32) { store32(p, v) }
func lowerU8(p uint32, v uint8)   { store8(p, v) }

func lowerIPConfig(p uint32, ip IPConfig) {
	stringRef(p+ipConfigAddress, ip.Address)
	lowerOption(p+ipConfigGateway, payload4, ip.Gateway, stringRef)
}

func lowerRoute(p uint32, r Route) {
	stringRef(p+routeDst, r.Dst)
	lowerOption(p+routeGW, payload4, r.GW, stringRef)
	lowerOption(p+routeMTU, payload4, r.MTU, lowerU32)
	lowerOption(p+routeAdvMSS, payload4, r.AdvMSS, lowerU32)
	lowerOption(p+routePriority, payload4, r.Priority, lowerU32)
	lowerOption(p+routeTable, payload4, r.Table, lowerU32)
	lowerOption(p+routeScope, payload1, r.Scope, lowerU8)
}

func lowerStrings(p uint32, list []string) { lowerList(p, 8, list, stringRef) }

func lowerIPAMResult(p uint32, r *Result) {
	lowerList(p+ipamResultIPs, ipConfigSize, r.IPs, lowerIPConfig)
	lowerList(p+ipamResultRoutes, routeSize, r.Routes, lowerRoute)
	dns := p + ipamResultDNS
	lowerStrings(dns+dnsNameservers, r.DNS.Nameservers)
	lowerOption(dns+dnsDomain, payload4, r.DNS.Domain, stringRef)
	lowerStrings(dns+dnsSearch, r.DNS.Search)
	lowerStrings(dns+dnsOptions, r.DNS.Options)
}

func lowerError(p uint32, e *Error) {
	store32(p+errorCode, e.Code)
	stringRef(p+errorMsg, e.Msg)
	stringRef(p+errorDetails, e.Details)
}

// lowerResult writes result<T, error> into a pinned return area of `size` bytes, the
// value or the error at `payload`, and returns it.
func lowerResult[T any](size, payload uint32, v *T, e *Error, lower func(uint32, T)) uint32 {
	ret, _ := alloc(size)
	if e != nil {
		store8(ret, 1)
		lowerError(ret+payload, e)
		return ret
	}
	var zero T
	if v == nil {
		v = &zero
	}
	lower(ret+payload, *v)
	return ret
}

// lowerAddReturn writes ADD's answer into a pinned return area and returns it.
func lowerAddReturn(r *Result, e *Error) uint32 {
	return lowerResult(addReturnSize, payload4, r, e, func(p uint32, r Result) { lowerIPAMResult(p, &r) })
}

// lowerUnitReturn writes a result<_, error> into a pinned return area and returns it.
func lowerUnitReturn(e *Error) uint32 {
	return lowerResult(unitReturnSize, payload4, (*struct{})(nil), e, func(uint32, struct{}) {})
}

// keep makes sure v is alive up to here (for memory passed by address to the host).
func keep(v any) { runtime.KeepAlive(v) }
