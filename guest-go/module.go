// Package ipam is the Go SDK for wasm-ipam modules: WebAssembly components the
// `wasm-ipam` CNI plugin runs under its host-wide lock and post-grant deadline.
//
// A module implements Module (ADD and DEL) over a Store it is handed, and may
// implement the optional interfaces: Checker and GarbageCollector (defaults built on
// AllocationLister, as the Rust SDK's), and for the operator's commands
// AllocationLister and PoolReporter (`wasm-ipam list`, `stats`), UsageReporter
// (`stats` in detail), NodeReleaser (`release-node`) and Reserver (`reserve`,
// `unreserve`); Capabilities says which of them a module implements. CNI STATUS is the host's
// (contract 0.2.5): a module tells it what makes some ADDs fail with Degraded. It registers itself with Export from an init function, and
// build.sh turns the package main into a component exporting `cni:ipam/handler`.
// Because the store is an argument, the same code runs in a host (on HostStore) and
// in a plain `go test` (on a MemoryStore).
package ipam

import (
	"fmt"
	"strings"
)

// Module is what every module implements: one function per CNI command it must
// answer itself.
type Module interface {
	// Add allocates addresses for req.ContainerID / req.Ifname.
	Add(req *Request, store Store) (*Result, *Error)
	// Del releases what Add allocated; it succeeds when nothing is allocated (a DEL
	// may come twice, or for an ADD that failed).
	Del(req *Request, store Store) *Error
}

// Checker is a module's own CHECK. Without it, CHECK succeeds when an allocation
// AllocationLister lists is the attachment's (one with an empty Ifname is the
// container's), else code 3; without AllocationLister it is code 121.
type Checker interface {
	Check(req *Request, store Store) *Error
}

// GarbageCollector is a module's own GC. Without it, GC runs a DEL, as Del does it,
// for each attachment AllocationLister lists that no valid attachment is; every DEL
// is tried and the failures reported together. Without AllocationLister it is code
// 121.
type GarbageCollector interface {
	GC(req *Request, valid []Attachment, store Store) *Error
}

// Check answers CHECK for m: its own Check, or the default.
func Check(m Module, req *Request, store Store) *Error {
	if c, ok := m.(Checker); ok {
		return c.Check(req, store)
	}
	held, err := Allocations(m, ContextOf(req), store)
	if err != nil {
		return prefixed("cannot check the attachment", err)
	}
	for _, a := range held {
		if holds(a, Attachment{req.ContainerID, req.Ifname}) {
			return nil
		}
	}
	return NewError(CodeUnknownContainer, "no address is allocated to container %s interface %s", req.ContainerID, req.Ifname)
}

// CollectGarbage answers GC for m: its own GC, or the default.
func CollectGarbage(m Module, req *Request, valid []Attachment, store Store) *Error {
	if g, ok := m.(GarbageCollector); ok {
		return g.GC(req, valid, store)
	}
	held, err := Allocations(m, ContextOf(req), store)
	if err != nil {
		return prefixed("cannot collect garbage", err)
	}
	var stale []Attachment
	for _, a := range held {
		attachment := Attachment{a.ContainerID, a.Ifname}
		isValid := false
		for _, v := range valid {
			if holds(a, v) {
				isValid = true
				break
			}
		}
		if !isValid && !contains(stale, attachment) {
			stale = append(stale, attachment)
		}
	}
	var failed []string
	var first *Error
	for _, a := range stale {
		del := *req
		del.Command, del.ContainerID, del.Ifname, del.Netns, del.PrevResult = CmdDel, a.ContainerID, a.Ifname, "", nil
		if err := m.Del(&del, store); err != nil {
			if first == nil {
				first = err
			}
			failed = append(failed, fmt.Sprintf("%s %s: %s", a.ContainerID, a.Ifname, err.Msg))
		}
	}
	if first == nil {
		return nil
	}
	return NewError(first.Code, "GC could not release %d attachment(s)", len(failed)).WithDetails(strings.Join(failed, "; "))
}

func holds(a Allocation, attachment Attachment) bool {
	return a.ContainerID == attachment.ContainerID && (a.Ifname == "" || a.Ifname == attachment.Ifname)
}

func contains(list []Attachment, a Attachment) bool {
	for _, x := range list {
		if x == a {
			return true
		}
	}
	return false
}

func prefixed(what string, e *Error) *Error {
	return &Error{Code: e.Code, Msg: what + ": " + e.Msg, Details: e.Details}
}
