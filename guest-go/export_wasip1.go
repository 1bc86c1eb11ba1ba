//go:build wasip1

package ipam

// The component's `cni:ipam/handler` export: each function lifts its parameters
// (whose blocks the host allocated through cabi_realloc, unpinned once lifted), runs
// the registered module, and lowers its answer into pinned memory, which the
// function's post-return unpins once the host has read it.

//go:wasmexport cni:ipam/handler@0.2.5#add
func exportAdd(p uint32) uint32 {
	req := liftRequest(p)
	release(0)
	begin(&req)
	result, err := exported().Add(&req, HostStore{})
	return lowerAddReturn(result, err)
}

//go:wasmexport cni:ipam/handler@0.2.5#del
func exportDel(p uint32) uint32 {
	req := liftRequest(p)
	release(0)
	begin(&req)
	return lowerUnitReturn(exported().Del(&req, HostStore{}))
}

//go:wasmexport cni:ipam/handler@0.2.5#check
func exportCheck(p uint32) uint32 {
	req := liftRequest(p)
	release(0)
	begin(&req)
	return lowerUnitReturn(Check(exported(), &req, HostStore{}))
}

//go:wasmexport cni:ipam/handler@0.2.5#gc
func exportGC(p uint32) uint32 {
	req := liftRequest(p)
	valid := liftList(p+requestSize, attachmentSize, liftAttachment)
	release(0)
	begin(&req)
	return lowerUnitReturn(CollectGarbage(exported(), &req, valid, HostStore{}))
}

// A host of 0.2.5 or later answers STATUS itself and never calls this; the export
// stays in the world for hosts of earlier versions, which refuse a 0.2.5 module.
//
//go:wasmexport cni:ipam/handler@0.2.5#status
func exportStatus(p uint32) uint32 {
	liftRequest(p)
	release(0)
	return lowerUnitReturn(nil)
}

//go:wasmexport cabi_post_cni:ipam/handler@0.2.5#add
func postAdd(uint32) { release(0) }

//go:wasmexport cabi_post_cni:ipam/handler@0.2.5#del
func postDel(uint32) { release(0) }

//go:wasmexport cabi_post_cni:ipam/handler@0.2.5#check
func postCheck(uint32) { release(0) }

//go:wasmexport cabi_post_cni:ipam/handler@0.2.5#gc
func postGC(uint32) { release(0) }

//go:wasmexport cabi_post_cni:ipam/handler@0.2.5#status
func postStatus(uint32) { release(0) }
