//go:build wasip1

package ipam

// The WASI adapter's memory. wasmtime's preview-1 adapter (adapter/) allocates its
// state, and wit-component its stack, on the adapter's first WASI call, which the Go
// runtime makes inside `_initialize`, before Go's heap exists. They ask the main
// module's `cabi_realloc_adapter` for it; this one hands out an arena in Go's static
// data (below the heap's start, which Go's allocator never grows into) and calls
// nothing in the runtime, so it can run before the runtime is up. Taking the memory
// with `memory.grow` instead does not work: Go's sbrk assumes it alone grows memory
// and later lays its heap over the adapter's pages.

import "unsafe"

// adapterArenaSize holds the adapter's state (under a page in wasmtime 48) and the
// stack wit-component gives it (a page), with room to spare.
const adapterArenaSize = 4 << 16

var (
	adapterArena [adapterArenaSize]byte
	adapterUsed  uintptr
)

// cabiReallocAdapter is a bump allocator over adapterArena: the adapter allocates a
// few blocks once per instance and never frees or grows them. It returns 0 (which
// the adapter treats as a failed allocation and traps on) when the arena is spent.
//
//go:wasmexport cabi_realloc_adapter
//go:nosplit
func cabiReallocAdapter(oldPtr, oldSize, align, newSize uint32) uint32 {
	if oldPtr != 0 || align == 0 || align&(align-1) != 0 {
		return 0
	}
	base := uintptr(unsafe.Pointer(&adapterArena[0]))
	start := (base + adapterUsed + uintptr(align) - 1) &^ (uintptr(align) - 1)
	end := start + uintptr(newSize)
	if end > base+adapterArenaSize {
		return 0
	}
	adapterUsed = end - base
	return uint32(start)
}
